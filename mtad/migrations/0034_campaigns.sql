-- Campaigns: a tenant's named sends (X-Mtad-Campaign, "campaign" over HTTP), made
-- on first use by the accept; the messages and deliveries of one name it.
-- Mirrors mtad.spool.campaigns.State.
CREATE TYPE campaign_state AS ENUM ('active', 'paused', 'cancelled');

CREATE TABLE campaigns (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant     text NOT NULL,
    name       text NOT NULL CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}$'),  -- campaigns.NAME
    state      campaign_state NOT NULL DEFAULT 'active',
    reason     text,                  -- why paused or cancelled
    max_per_hour integer CHECK (max_per_hour > 0),  -- sends begun per hour (UTC); NULL: no limit
    max_per_day  integer CHECK (max_per_day > 0),   -- per day (UTC)
    pool_paused  text,                -- the account pool that has no account able to send its mail, if one
    created_at timestamptz NOT NULL,
    changed_at timestamptz NOT NULL,  -- of its state
    UNIQUE (tenant, name)
);
-- begin.sql looks for the stopped campaigns of what it begins: none, mostly.
CREATE INDEX campaigns_stopped ON campaigns (id) WHERE state <> 'active';

ALTER TABLE messages ADD COLUMN campaign bigint;    -- campaigns.id; NULL: none
ALTER TABLE deliveries ADD COLUMN campaign bigint;  -- its message's, for the counts and begin.sql
CREATE INDEX messages_campaign ON messages (campaign) WHERE campaign IS NOT NULL;
-- The campaigns with mail through an account pool (campaigns/pool_paused.sql).
CREATE INDEX messages_account_pool_campaign ON messages (account_pool, campaign)
    WHERE campaign IS NOT NULL AND account_pool IS NOT NULL;

-- A campaign's progress: each statement that moves its deliveries or records what
-- came back adds what it changed here, in its own transaction (the triggers below,
-- sql/functions/mtad_campaign_*.sql). Rows are only inserted, so that nodes settling
-- one campaign at once never wait on a counter; retention folds them into
-- campaign_counts and campaign_minutes, and a read sums both.
CREATE TABLE campaign_moves (
    campaign bigint NOT NULL,
    bucket   text NOT NULL,      -- mtad_campaign_bucket(), 'messages', or an event kind
    n        integer NOT NULL,   -- entered (+) or left (-)
    at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX campaign_moves_campaign ON campaign_moves (campaign);

CREATE TABLE campaign_counts (
    campaign bigint NOT NULL,
    bucket   text NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (campaign, bucket)
);

-- The sends begun of a campaign with limits, by hour (UTC): leases/begin.sql counts
-- them under the campaign's row lock and sets aside what would go over.
CREATE TABLE campaign_sends (
    campaign bigint NOT NULL,
    hour     timestamptz NOT NULL,
    sends    integer NOT NULL,
    PRIMARY KEY (campaign, hour)
);

-- Deliveries settled (delivered, bounced, failed) by minute, for the recent rate.
CREATE TABLE campaign_minutes (
    campaign bigint NOT NULL,
    minute   timestamptz NOT NULL,
    settled  integer NOT NULL,
    PRIMARY KEY (campaign, minute)
);

-- As this migration wrote them; the current text is in mtad/sql/functions/.
CREATE FUNCTION mtad_campaign_bucket(state delivery_state, reason delivery_reason) RETURNS text
LANGUAGE sql IMMUTABLE AS $$ SELECT state::text $$;
CREATE FUNCTION mtad_campaign_inserted() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION mtad_campaign_moved() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE FUNCTION mtad_campaign_heard() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;

CREATE TRIGGER campaign_inserted AFTER INSERT ON deliveries REFERENCING NEW TABLE AS came
    FOR EACH STATEMENT EXECUTE FUNCTION mtad_campaign_inserted();
CREATE TRIGGER campaign_moved AFTER UPDATE ON deliveries REFERENCING OLD TABLE AS was NEW TABLE AS became
    FOR EACH STATEMENT EXECUTE FUNCTION mtad_campaign_moved();
CREATE TRIGGER campaign_heard AFTER INSERT ON events REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION mtad_campaign_heard();
