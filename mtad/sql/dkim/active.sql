-- The active keys, with their sealed private halves (for the signer).
SELECT id, domain, selector, algorithm, state::text AS state, private_key, created_at
FROM dkim_keys WHERE state = 'active' ORDER BY domain, id
