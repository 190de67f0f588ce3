-- Make campaign $2 of tenant $1 at $3, active, with limits $4 per hour and $5 per
-- day (NULL: none). No row: it exists already.
INSERT INTO campaigns (tenant, name, created_at, changed_at, max_per_hour, max_per_day)
VALUES ($1, $2, $3, $3, $4, $5)
ON CONFLICT (tenant, name) DO NOTHING
RETURNING id
