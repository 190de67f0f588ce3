-- Set campaign $2 of tenant $1's limits at $3: $4 sends begun per hour, $5 per day
-- (NULL: none). Returns its id; no row: no such campaign.
UPDATE campaigns SET max_per_hour = $4, max_per_day = $5, changed_at = $3
WHERE tenant = $1 AND name = $2
RETURNING id
