-- Key $2 of domain $1 moves to state $3 at $4; returns it as list does (no row: no such key).
UPDATE dkim_keys SET state = $3::dkim_key_state, changed_at = $4 WHERE domain = $1 AND selector = $2
RETURNING id, domain, selector, algorithm, state::text AS state, record, created_at, changed_at
