-- Make campaign $2 of tenant $1 at $3, active. No row: it exists already.
INSERT INTO campaigns (tenant, name, created_at, changed_at) VALUES ($1, $2, $3, $3)
ON CONFLICT (tenant, name) DO NOTHING
RETURNING id, tenant, name, state::text AS state, reason, created_at, changed_at
