-- Pending key $1 becomes active at $2; the active keys of its domain with the same
-- algorithm become retiring, each with a dkim_key event. Returns the keys changed.
WITH new AS (
    UPDATE dkim_keys SET state = 'active', changed_at = $2 WHERE id = $1 AND state = 'pending'
    RETURNING id, domain, selector, algorithm, 'pending'::text AS was, state::text AS state
), old AS (
    UPDATE dkim_keys k SET state = 'retiring', changed_at = $2
    FROM new WHERE k.domain = new.domain AND k.algorithm = new.algorithm AND k.state = 'active' AND k.id <> new.id
    RETURNING k.id, k.domain, k.selector, k.algorithm, 'active'::text AS was, k.state::text AS state
), changed AS (
    SELECT * FROM new UNION ALL SELECT * FROM old
), logged AS (
    INSERT INTO events (at, kind, data)
    SELECT $2, 'dkim_key', jsonb_build_object('domain', domain, 'selector', selector, 'algorithm', algorithm,
                                              'from', was, 'to', state)
    FROM changed
)
SELECT id, domain, selector, was, state FROM changed
