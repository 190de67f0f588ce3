-- The inboxes of sending accounts that mtad reads over IMAP: bounces of relayed
-- mail and replies land there, not at a VERP address. One row per account whose
-- inbox is read; the read position makes a restart neither miss nor repeat a
-- message, and the lease lets one node of the cluster read each inbox.
CREATE TABLE inboxes (
    account     integer PRIMARY KEY REFERENCES accounts (id) ON DELETE CASCADE,
    host        text NOT NULL CHECK (host <> ''),                    -- the IMAP server (implicit TLS)
    port        integer NOT NULL CHECK (port BETWEEN 1 AND 65535),  -- 993
    uidvalidity bigint,                        -- the mailbox's UIDVALIDITY for last_uid (NULL: never read)
    last_uid    bigint NOT NULL DEFAULT 0,     -- every message up to this UID is done
    node        text,                          -- the node reading it while lease_until is ahead
    lease_until timestamptz,
    read_at     timestamptz,                   -- when it was last read to its end
    error       text,                          -- why the last session failed (NULL: it did not)
    created_at  timestamptz NOT NULL DEFAULT now()
);
