-- What an operator has suspended (`mtad suspend`): the mail of a provider group, a
-- tenant, a source pool or a source address waits, queued, until resumed or
-- `until`; an account is disabled meanwhile. And the provider groups whose mail
-- leaves from another source pool for a while (`mtad queue reroute`).
CREATE TABLE suspensions (
    kind       text NOT NULL CHECK (kind IN ('provider', 'tenant', 'pool', 'source', 'account')),
    key        text NOT NULL,
    reason     text NOT NULL,
    created_at timestamptz NOT NULL,
    until      timestamptz,  -- NULL: until resumed
    PRIMARY KEY (kind, key)
);

CREATE TABLE reroutes (
    provider   text PRIMARY KEY,
    pool       text NOT NULL,
    reason     text NOT NULL,
    created_at timestamptz NOT NULL,
    until      timestamptz  -- NULL: until taken back
);
