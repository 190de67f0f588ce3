-- Wakes the event consumers after a commit that wrote events with
-- mtad.wake_after_commit set: a transaction of its own, which writes nothing, so
-- that its commit waits for no WAL flush while it holds the NOTIFY lock.
SELECT pg_notify('mtad_events', '')
