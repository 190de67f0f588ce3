-- MTA-STS policies (RFC 8461) of recipient domains, as fetched: shared by every
-- node and kept across restarts until they expire (max_age after the fetch). The
-- last failure of a fetch, or of a delivery held to the policy, is kept with it; a
-- domain whose policy could not be fetched and none is cached has a row with the
-- failure alone.
CREATE TABLE mta_sts_policies (
    domain       text PRIMARY KEY,
    policy_id    text,                 -- the _mta-sts TXT id it was fetched for; NULL: none fetched
    mode         text CHECK (mode IN ('enforce', 'testing', 'none')),
    mx           text[] NOT NULL DEFAULT '{}',  -- the mx patterns, lower case
    max_age      integer,
    fetched_at   timestamptz,
    expires_at   timestamptz,
    failure      text,                 -- the last failure; NULL: none since the fetch
    failed_at    timestamptz,
    CHECK ((policy_id IS NULL) = (mode IS NULL) AND (mode IS NULL) = (expires_at IS NULL))
);
