-- Wakes the event consumers and, when $1, the delivering nodes, after the commit
-- of accepts written with mtad.wake_after_commit set: one transaction of its own
-- for both, which writes only its commit record, never waited for (sql/events/wake.sql,
-- sql/leases/notify_due.sql).
SELECT pg_notify('mtad_events', ''), CASE WHEN $1::boolean THEN pg_notify('mtad_due', '') END
