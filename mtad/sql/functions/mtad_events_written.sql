-- A statement that writes events wakes the event consumers (the trigger of migration
-- 0025; PostgreSQL folds the notifications of one transaction into one), unless its
-- transaction set mtad.wake_after_commit. A NOTIFY takes a lock of the whole cluster
-- at commit and holds it through the WAL flush (notifications go out in commit
-- order): writers that all notified would commit one at a time, not together. So
-- the busiest (accept, begin, record) set it and wake the consumers after their
-- commit instead (sql/events/wake.sql), in a transaction that flushes nothing.
CREATE OR REPLACE FUNCTION mtad_events_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('mtad.wake_after_commit', true) IS DISTINCT FROM 'on'
       AND EXISTS (SELECT FROM written) THEN
        PERFORM pg_notify('mtad_events', '');
    END IF;
    RETURN NULL;
END;
$$;
