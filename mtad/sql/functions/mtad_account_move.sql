-- An account's state moves, with its event: to p_state until p_until (NULL: until
-- changed) because of p_reason, if the state it is in at p_now is one of p_from
-- (mtad.accounts.TRANSITIONS). Returns the account's id and the state it was in,
-- or no row when it does not exist or the move is not allowed. The row lock taken
-- by the UPDATE orders two moves of one account; each writes the state it saw. A
-- move to 'active' (an operator's enable) starts its health afresh (health_since).
CREATE OR REPLACE FUNCTION mtad_account_move(
    p_name text, p_state account_state, p_until timestamptz, p_reason text, p_from account_state[],
    p_now timestamptz, OUT id integer, OUT was account_state
) RETURNS SETOF record LANGUAGE plpgsql AS $$
DECLARE
    a accounts%ROWTYPE;
BEGIN
    SELECT * INTO a FROM accounts WHERE accounts.name = p_name FOR UPDATE;
    IF NOT FOUND OR NOT mtad_account_state_at(a.state, a.state_until, p_now) = ANY(p_from) THEN
        RETURN;
    END IF;
    was := mtad_account_state_at(a.state, a.state_until, p_now);
    id := a.id;
    UPDATE accounts SET state = p_state, state_until = p_until, state_reason = p_reason, updated_at = p_now,
                        health_since = CASE WHEN p_state = 'active' THEN p_now ELSE a.health_since END
    WHERE accounts.id = a.id;
    INSERT INTO events (at, kind, data)
    VALUES (p_now, 'account_state', jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool,
                                                      'from', was, 'to', p_state, 'until', p_until,
                                                      'reason', p_reason));
    RETURN NEXT;
END
$$;
