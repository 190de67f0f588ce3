-- Rest account p_account at p_now if it is active and its health
-- (mtad_account_health) is below p_floor (0: never): it moves to 'resting', with
-- its account_state event, until its health would be back at the floor as the
-- 24 hours' window moves on and its sends and bounces leave it (a bounce that
-- comes meanwhile is judged once the rest is over). Returns its health and the
-- end of the rest, or no row. Under the account's lock (mtad_reserve's key):
-- waited for when p_wait, else only tried (no row when another caller holds it).
CREATE OR REPLACE FUNCTION mtad_account_rest(
    p_account integer, p_now timestamptz, p_floor integer, p_wait boolean, OUT health integer, OUT until timestamptz
) RETURNS SETOF record LANGUAGE plpgsql AS $$
DECLARE
    lock_class CONSTANT integer := 1835098979;  -- 'macc', as in mtad_reserve
    a accounts%ROWTYPE;
    since timestamptz;
    why text;
BEGIN
    IF coalesce(p_floor, 0) <= 0 THEN
        RETURN;
    END IF;
    IF p_wait THEN
        PERFORM pg_advisory_xact_lock(lock_class, p_account);
    ELSIF NOT pg_try_advisory_xact_lock(lock_class, p_account) THEN
        RETURN;
    END IF;
    SELECT * INTO a FROM accounts WHERE id = p_account;
    IF NOT FOUND OR mtad_account_state_at(a.state, a.state_until, p_now) <> 'active' THEN
        RETURN;
    END IF;
    health := mtad_account_health(a.id, a.health_since, p_now);
    IF health >= p_floor THEN
        RETURN;
    END IF;
    since := greatest(p_now - interval '24 hours', a.health_since);
    -- Each send and bounce leaves the window 24 hours after it: the first moment
    -- what is left is healthy enough (once all have left, at the latest: 100).
    WITH items AS (
        SELECT r.reserved_at + interval '24 hours' AS leaves, 1 AS sends, 0 AS bounces
        FROM account_reservations r
        WHERE r.account = a.id AND r.state = 'confirmed' AND r.reserved_at > since
        UNION ALL
        SELECT e.at + interval '24 hours', 0, 1
        FROM events e
        WHERE e.kind = 'account_bounce' AND (e.data ->> 'account')::integer = a.id AND e.at > since
    ),
    remaining AS (
        SELECT i.leaves, sum(i.sends) OVER () - sum(i.sends) OVER w AS sends,
               sum(i.bounces) OVER () - sum(i.bounces) OVER w AS bounces
        FROM items i
        WINDOW w AS (ORDER BY i.leaves)  -- up to and with the items that leave at the same moment
    )
    SELECT min(r.leaves) INTO until FROM remaining r
    WHERE round(100.0 * (r.sends + 1) / (r.sends + 1 + r.bounces)) >= p_floor;
    why := format('health %s is below the floor of %s', health, p_floor);
    UPDATE accounts SET state = 'resting', state_until = until, state_reason = why, updated_at = p_now
    WHERE id = a.id;
    INSERT INTO events (at, kind, data)
    VALUES (p_now, 'account_state', jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool,
                                                      'from', 'active', 'to', 'resting', 'until', until,
                                                      'reason', why, 'health', health, 'floor', p_floor));
    RETURN NEXT;
END
$$;
