SELECT t.name, t.state::text AS state, t.password_hash IS NOT NULL AS has_password,
       t.created_at, t.updated_at
FROM tenants t ORDER BY t.name
