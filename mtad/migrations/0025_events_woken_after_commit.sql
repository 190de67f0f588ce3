-- The events trigger sees what its statement wrote (a transition table): a statement
-- that wrote no event wakes nobody, and a writer that sets mtad.wake_after_commit
-- wakes the consumers itself once committed (sql/functions/mtad_events_written.sql:
-- a NOTIFY holds a lock of the whole cluster through its transaction's WAL flush).
DROP TRIGGER events_written ON events;
CREATE TRIGGER events_written AFTER INSERT ON events REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION mtad_events_written();
