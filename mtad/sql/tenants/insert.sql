INSERT INTO tenants (name, password_hash) VALUES ($1, $2)
