-- What comes back after delivery.
--
-- Event consumers: each keeps its position in the event log here, as (xid, id):
-- every event of a transaction older than the position's xid, and those of its
-- xid up to its id, are done. Events are read in (xid, id) order and only below
-- the oldest transaction still running, so that an event committed late by a
-- long transaction is never skipped (ids are taken in an order commits do not
-- keep). Events written before this migration have no xid: consumers start
-- after them.
ALTER TABLE events ADD COLUMN xid xid8;
ALTER TABLE events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
CREATE INDEX events_xid ON events (xid, id) WHERE xid IS NOT NULL;

CREATE TABLE event_consumers (
    name text PRIMARY KEY,
    position_xid xid8 NOT NULL,
    position_id bigint NOT NULL DEFAULT 0,
    updated_at timestamptz NOT NULL
);

-- A statement that writes events wakes the consumers (one notification per
-- transaction: PostgreSQL folds identical ones).
CREATE FUNCTION mtad_events_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mtad_events', '');
    RETURN NULL;
END;
$$;
CREATE TRIGGER events_written AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION mtad_events_written();

-- Suppression: the tenant '' is the global list, beside the per-tenant ones.
-- reason says why (mtad.feedback.suppression.Reason), detail what put it there
-- (the reply of a bounce, an operator's note), event the event that did.
-- expires_at: when it stops applying (NULL: never; complaints and unsubscribes
-- never expire by themselves).
ALTER TABLE suppressions RENAME COLUMN reason TO detail;
ALTER TABLE suppressions ALTER COLUMN detail DROP NOT NULL;
ALTER TABLE suppressions
    ADD COLUMN reason text NOT NULL DEFAULT 'hard_bounce'
        CHECK (reason IN ('hard_bounce', 'complaint', 'unsubscribe', 'manual')),
    ADD COLUMN event bigint,
    ADD COLUMN expires_at timestamptz;
ALTER TABLE suppressions ALTER COLUMN reason DROP DEFAULT;
UPDATE suppressions SET address = lower(address) WHERE address <> lower(address);  -- compared in lower case

-- A bounce or a reply that quotes the original's Message-ID finds its message.
CREATE INDEX messages_message_id ON messages (message_id);

-- A hard bounce that comes back after the receiver's 250 moves the delivery's
-- recorded outcome from delivered to bounced (mirrors lifecycle.Reason.ASYNC_BOUNCE).
ALTER TYPE delivery_reason ADD VALUE 'async_bounce';
