-- Wakes the event consumers after a commit that wrote events with
-- mtad.wake_after_commit set: a transaction of its own, which writes only its commit
-- record, and PostgreSQL flushes none of a transaction that wrote nothing else: its
-- commit waits for no WAL flush while it holds the NOTIFY lock.
SELECT pg_notify('mtad_events', '')
