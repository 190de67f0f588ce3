-- Consumer $1 exists from now on: a new one starts after the events already written.
INSERT INTO event_consumers (name, position_xid, position_id, updated_at)
VALUES ($1, pg_snapshot_xmin(pg_current_snapshot()), 0, $2)
ON CONFLICT (name) DO NOTHING
