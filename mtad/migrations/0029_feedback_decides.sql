-- What comes back now decides: complaints reach the warm-up of new source
-- addresses, a sending account whose health falls below its pool's floor rests,
-- and refusals of the sender count in the reputation windows.

-- Complaints per minute about the mail that left from a source address to a
-- provider group, counted by the `reputation` event consumer at the minute the
-- complaint arrived; each node warming the address reads those of its warm-up
-- day at its checkpoints (egress/complaints.sql). Retention deletes them with
-- the reputation windows' counts.
CREATE TABLE warmup_complaints (
    address    text NOT NULL,         -- the source address, as the delivered event names it
    provider   text NOT NULL,         -- the provider group
    minute     timestamptz NOT NULL,  -- when they arrived, to the minute
    complaints integer NOT NULL CHECK (complaints > 0),
    PRIMARY KEY (address, provider, minute)
);

-- Mirrors mtad.mailboxes.accounts.State: an account whose health fell below its
-- pool's health_floor rests until, as the 24 hours' window moves on, it would be
-- back at the floor (state_until).
ALTER TYPE account_state ADD VALUE 'resting';

-- Health is judged from the operator's last enable (NULL: never enabled), so that
-- an account enabled by hand starts afresh instead of resting again at once.
ALTER TABLE accounts ADD COLUMN health_since timestamptz;

-- Deferrals and bounces whose reason is on the sender's side (blocked, bad
-- reputation, authentication, rate...): never the recipient's fault.
ALTER TABLE reputation_counts ADD COLUMN refused integer NOT NULL DEFAULT 0;

-- mtad_choose takes the pool's health floor and returns the accounts it rested;
-- the function file makes it anew.
DROP FUNCTION IF EXISTS mtad_choose(text, timestamptz, integer[], double precision[], bigint[], text);
