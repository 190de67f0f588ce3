UPDATE tenants SET password_hash = $2, updated_at = now() WHERE name = $1
