-- Egress: the warm-up of new source addresses, one row per (address, provider).
-- A warming address may send a growing number of messages per day to each
-- provider; its day number advances only when the provider took the previous
-- day's mail well (mtad.egress). Written by each node's periodic save.
CREATE TABLE warmup (
    address     text NOT NULL,         -- the source IP address, in Python's ipaddress notation
    provider    text NOT NULL,         -- the provider group: "google", "mx:host1,host2", ...
    day         integer NOT NULL CHECK (day >= 1),  -- the warm-up day, 1 on the first day of sending
    day_started timestamptz NOT NULL,  -- when this day began; it ends 24 h later
    sent        integer NOT NULL CHECK (sent >= 0),        -- messages sent on this day
    deferred    integer NOT NULL CHECK (deferred >= 0),    -- deferrals and throttling replies this day
    complaints  integer NOT NULL CHECK (complaints >= 0),  -- feedback-loop complaints received this day
    updated_at  timestamptz NOT NULL,  -- the save that last changed the row
    PRIMARY KEY (address, provider)
);
