-- Key $2 of domain $1 moves to state $3 at $4 (an operator's command), with its
-- dkim_key event; returns it as list does (no row: no such key).
WITH changed AS (
    UPDATE dkim_keys k SET state = $3::dkim_key_state, changed_at = $4 WHERE domain = $1 AND selector = $2
    RETURNING k.*, (SELECT o.state::text FROM dkim_keys o WHERE o.id = k.id) AS was
), logged AS (
    INSERT INTO events (at, kind, data)
    SELECT $4, 'dkim_key', jsonb_build_object('domain', domain, 'selector', selector, 'algorithm', algorithm,
                                              'from', was, 'to', state, 'by', 'operator')
    FROM changed
)
SELECT id, domain, selector, algorithm, state::text AS state, record, created_at, changed_at, published_at,
       published_ttl
FROM changed
