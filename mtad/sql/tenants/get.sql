SELECT name, password_hash, state::text AS state, created_at, updated_at FROM tenants WHERE name = $1
