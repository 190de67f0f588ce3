-- Deliveries $2 of node $1 were refused before anything went out (a reroute to
-- another sending account): their attempt ids are cleared, so that neither a
-- release at shutdown nor a retry after a crash takes them for "maybe sent".
UPDATE deliveries SET attempt_id = NULL, updated_at = $3
WHERE id = ANY($2::bigint[]) AND state::text = 'leased' AND lease_owner = $1  -- state as text: see record_query.sql

