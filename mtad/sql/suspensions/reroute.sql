-- Provider group $1's mail leaves from pool $2 (reason $3, from $4 until $5; NULL:
-- until taken back); replaces a reroute of the group. Returns the row.
INSERT INTO reroutes AS r (provider, pool, reason, created_at, until) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (provider) DO UPDATE SET pool = $2, reason = $3, created_at = $4, until = $5
RETURNING provider, pool, reason, created_at, until
