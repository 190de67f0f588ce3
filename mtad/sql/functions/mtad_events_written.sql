-- A statement that writes events wakes the event consumers (a trigger of migration
-- 0014; PostgreSQL folds the notifications of one transaction into one).
CREATE OR REPLACE FUNCTION mtad_events_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mtad_events', '');
    RETURN NULL;
END;
$$;
