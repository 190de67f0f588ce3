-- Every tenant's name.
SELECT name FROM tenants ORDER BY name
