-- The spool: messages (body stored once), one delivery per recipient, the
-- append-only event log, tenants, nodes, and idempotency keys.
--
-- No foreign keys on the hot path: deliveries and events are written in the
-- same transaction as their message, and a foreign-key check is planned once
-- per connection; planned while the table was empty (a drained queue) it is a
-- sequential scan that cut group-commit accept from ~2.5 k to ~0.9 k msg/s.

-- Mirrors mtad.lifecycle.State (tests check that they agree).
CREATE TYPE delivery_state AS ENUM (
    'queued',     -- waiting for next_attempt_at; leasable
    'leased',     -- owned by lease_owner until lease_expires_at
    'deferred',   -- a transient outcome; due again at next_attempt_at
    'delivered',  -- final: the receiver said 2xx
    'bounced',    -- final: permanent reply, or older than the maximum age
    'failed',     -- final: dead letter after repeated non-SMTP failures
    'cancelled'   -- final: suppressed, cancelled by the tenant or an operator
);

-- Mirrors mtad.lifecycle.Reason.
CREATE TYPE delivery_reason AS ENUM (
    'throttled', 'mx_tempfail', 'dns_tempfail', 'connect_failed', 'tls_failed',
    'timeout', 'disconnected', 'recipient_rejected', 'content_rejected',
    'permanent_reply', 'no_route', 'expired', 'lease_expired', 'released',
    'mailbox_cooldown', 'suppressed', 'admin', 'internal'
);

CREATE TYPE tenant_state AS ENUM ('active', 'disabled');

CREATE TABLE tenants (
    name          text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    password_hash text,                   -- scrypt$N$r$p$salt$hash; NULL: cannot AUTH
    state         tenant_state NOT NULL DEFAULT 'active',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nodes (
    id           text PRIMARY KEY,
    hostname     text NOT NULL,
    pid          integer NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

CREATE TABLE messages (
    id              uuid PRIMARY KEY,     -- the queue id (time-ordered, made by mtad)
    tenant          text NOT NULL,
    sender          text NOT NULL,        -- envelope sender (MAIL FROM)
    message_id      text NOT NULL,        -- the Message-ID header, fixed at accept
    idempotency_key text,                 -- Idempotency-Key header, if given
    size            integer NOT NULL,     -- octets of body
    body            bytea NOT NULL,       -- as received, with the headers mtad added (stored
                                          -- uncompressed: PostgreSQL's pglz costs CPU on the
                                          -- accept path, and mail is mostly base64 anyway)
    smtputf8        boolean NOT NULL DEFAULT false,
    client_address  text NOT NULL,
    received_at     timestamptz NOT NULL
);
ALTER TABLE messages ALTER COLUMN body SET STORAGE EXTERNAL;
-- received_at grows with the table: a BRIN index costs next to nothing to maintain.
CREATE INDEX messages_received_at ON messages USING brin (received_at);

CREATE TABLE deliveries (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message          uuid NOT NULL,       -- messages.id
    recipient        text NOT NULL,       -- local@domain, domain as an A-label
    domain           text NOT NULL,       -- lower-case A-label, for routing
    state            delivery_state NOT NULL DEFAULT 'queued',
    priority         smallint NOT NULL DEFAULT 0,  -- higher goes first
    attempts         integer NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    lease_owner      text,                -- nodes.id while leased
    lease_expires_at timestamptz,
    attempt_id       uuid,                -- written before DATA: "maybe sent" after a crash
    last_code        smallint,            -- last reply: basic code,
    last_enhanced    text,                --   enhanced code,
    last_text        text,                --   text
    reason           delivery_reason,     -- why it was last deferred, bounced, failed...
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL,
    CONSTRAINT leased_has_owner CHECK (
        (state = 'leased') = (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)
    )
);
-- The lease query: due deliveries, priority first, then age.
CREATE INDEX deliveries_due ON deliveries (priority DESC, next_attempt_at)
    WHERE state IN ('queued', 'deferred');
-- The reaper: leases that expired.
CREATE INDEX deliveries_lease_expiry ON deliveries (lease_expires_at) WHERE state = 'leased';
-- Per-message lookups.
CREATE INDEX deliveries_message ON deliveries (message);

-- Append-only: rows are inserted, never updated (retention may delete old ones).
CREATE TABLE events (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at       timestamptz NOT NULL DEFAULT now(),
    kind     text NOT NULL,
    message  uuid,
    delivery bigint,
    tenant   text,
    data     jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX events_message ON events (message);

-- As this migration wrote it; the current text is in mtad/sql/functions/.
CREATE FUNCTION events_are_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'events is append-only';
END
$$;
CREATE TRIGGER events_append_only BEFORE UPDATE ON events
    FOR EACH ROW EXECUTE FUNCTION events_are_append_only();

-- Idempotent resubmission: a (tenant, key) owns its message until expires_at.
-- Keys are "key:<Idempotency-Key>" or "msgid:<Message-ID>".
CREATE TABLE idempotency_keys (
    tenant     text NOT NULL,
    key        text NOT NULL,
    message    uuid NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX idempotency_keys_expiry ON idempotency_keys USING brin (expires_at);
