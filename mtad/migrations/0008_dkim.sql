-- DKIM keys (mtad.dkim): one per (domain, selector), the private half sealed by
-- mtad.vault with the key named in [accounts] (never stored here).

-- Mirrors mtad.dkim.KeyState.
CREATE TYPE dkim_key_state AS ENUM (
    'pending',   -- generated; its DNS record is not (known to be) published yet
    'active',    -- signs
    'retiring',  -- replaced; its record stays published for the overlap
    'revoked'    -- its record may be emptied (p=)
);

CREATE TABLE dkim_keys (
    id          integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    domain      text NOT NULL CHECK (domain = lower(domain) AND domain <> ''),  -- the d= domain
    selector    text NOT NULL CHECK (selector ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),  -- the s= selector
    algorithm   text NOT NULL CHECK (algorithm IN ('rsa2048', 'ed25519')),
    private_key bytea NOT NULL,  -- PKCS#8 PEM, sealed
    record      text NOT NULL,   -- the TXT record to publish at selector._domainkey.domain
    state       dkim_key_state NOT NULL DEFAULT 'pending',
    created_at  timestamptz NOT NULL DEFAULT now(),
    changed_at  timestamptz NOT NULL DEFAULT now(),  -- the last state change
    published_at  timestamptz,       -- pending: when DNS was first seen publishing the record
    published_ttl double precision,  -- pending: the TTL of that answer (caches may hold the old one that long)
    UNIQUE (domain, selector)
);
CREATE INDEX dkim_keys_active ON dkim_keys (domain) WHERE state = 'active';

-- The DKIM signature fields a message was last sent with, so that a retry reuses
-- them while the keys and the header are the same (signing costs half a
-- millisecond): the fields, the ids of the keys that made them, and a digest of
-- the header block they cover. Written without waiting for the WAL flush; a lost
-- one only means the next attempt signs again.
ALTER TABLE messages
    ADD COLUMN dkim_fields bytea,
    ADD COLUMN dkim_keys   integer[],
    ADD COLUMN dkim_header bytea;
