-- Webhook endpoints: where a tenant is told what became of its mail. Each has a
-- secret (Standard Webhooks: whsec_ + base64 of its key), sealed by mtad.base.vault
-- with the key of [accounts] like the accounts' and DKIM keys; after a rotation the
-- previous secret signs too until previous_until, so that the receiver can switch.
CREATE TABLE webhook_endpoints (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text NOT NULL CHECK (tenant ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    url             text NOT NULL CHECK (url ~ '^https?://'),
    events          text[],          -- the event kinds it wants (mtad.base.events.Kind); NULL: every kind
    secret          bytea NOT NULL,  -- sealed
    previous_secret bytea,           -- sealed; signs too until previous_until
    previous_until  timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT previous_has_an_end CHECK ((previous_secret IS NULL) = (previous_until IS NULL))
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant);
