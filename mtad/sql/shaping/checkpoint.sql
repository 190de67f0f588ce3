-- Node $6 at $7 writes its buckets ($1 group, $2 source, $3 rate, $4 sessions,
-- $5 when feedback changed them, NULL if it did not): a row is inserted when
-- absent and replaced only by a later change, so a node never undoes what
-- another node learned after it.
INSERT INTO buckets (route_group, source, rate, sessions, changed_by, changed_at, updated_at)
SELECT g, s, r, n, $6, c, $7
FROM unnest($1::text[], $2::text[], $3::float8[], $4::integer[], $5::timestamptz[]) AS b(g, s, r, n, c)
ON CONFLICT (route_group, source) DO UPDATE
SET rate = excluded.rate, sessions = excluded.sessions, changed_by = excluded.changed_by,
    changed_at = excluded.changed_at, updated_at = excluded.updated_at
WHERE excluded.changed_at IS NOT NULL
  AND (buckets.changed_at IS NULL OR buckets.changed_at < excluded.changed_at)
