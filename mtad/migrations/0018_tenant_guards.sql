-- What guards the reputation every tenant shares: a tenant's state (paused, on
-- probation), the counters of its rate quotas, and the reputation windows' counts.

-- A row once a tenant was paused or put on probation; no row: active, no probation.
CREATE TABLE tenant_states (
    tenant          text PRIMARY KEY CHECK (tenant ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),
    paused_at       timestamptz,          -- NULL: not paused
    paused_by       text CHECK (paused_by IN ('auto', 'operator')),
    paused_reason   text,
    resumed_at      timestamptz,          -- the auto-pause reads only what was counted after
    probation       boolean NOT NULL DEFAULT false,
    probation_since timestamptz,
    probation_sent  bigint NOT NULL DEFAULT 0,  -- delivered since probation_since
    graduated_at    timestamptz,
    CONSTRAINT paused_says_why CHECK ((paused_at IS NULL) = (paused_reason IS NULL) AND
                                      (paused_at IS NULL) = (paused_by IS NULL))
);

-- Messages accepted per tenant in each clock hour and UTC day (the rate quotas),
-- taken before the accept's COMMIT and given back when it does not happen.
CREATE TABLE tenant_usage (
    tenant   text NOT NULL,
    period   text NOT NULL CHECK (period IN ('hour', 'day')),
    starts   timestamptz NOT NULL,
    messages integer NOT NULL DEFAULT 0 CHECK (messages >= 0),
    PRIMARY KEY (tenant, period, starts)
);

-- Outcomes per minute by tenant, provider group and source address, summed into
-- the sliding windows (1 h, 24 h) by the `reputation` event consumer.
CREATE TABLE reputation_counts (
    scope        text NOT NULL CHECK (scope IN ('tenant', 'provider', 'source')),
    key          text NOT NULL,
    minute       timestamptz NOT NULL,
    delivered    integer NOT NULL DEFAULT 0,
    deferred     integer NOT NULL DEFAULT 0,
    bounced      integer NOT NULL DEFAULT 0,  -- hard bounces: the address does not exist
    complained   integer NOT NULL DEFAULT 0,
    unsubscribed integer NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, key, minute)
);
