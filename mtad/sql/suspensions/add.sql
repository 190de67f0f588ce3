-- Suspend ($1 kind, $2 key) for reason $3 at $4 until $5 (NULL: until resumed); a
-- suspension of the same thing is replaced. Returns the row.
INSERT INTO suspensions AS s (kind, key, reason, created_at, until) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (kind, key) DO UPDATE SET reason = $3, created_at = $4, until = $5
RETURNING kind, key, reason, created_at, until
