-- Resume ($1 kind, $2 key). Returns the suspension ended (no row: none).
DELETE FROM suspensions WHERE kind = $1 AND key = $2
RETURNING kind, key, reason, created_at, until
