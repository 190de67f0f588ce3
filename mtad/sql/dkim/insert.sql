-- A new pending key: domain $1, selector $2, algorithm $3, sealed private key $4, record $5.
INSERT INTO dkim_keys (domain, selector, algorithm, private_key, record) VALUES ($1, $2, $3, $4, $5)
RETURNING id, state::text AS state, created_at
