-- One row: the digest of the function files last applied, and of the functions the
-- database held right after (so a function changed by hand is noticed too).
CREATE TABLE IF NOT EXISTS schema_functions (
    files     text NOT NULL,
    installed text NOT NULL
)
