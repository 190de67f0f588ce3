-- A send through account p_account was refused at p_now for its recipient or its
-- content, or complained of (p_data: the event's data): its account_bounce event,
-- which lowers its health, then a rest if its health is now below p_floor (0:
-- never; mtad_account_rest). Returns its health and the end of the rest, or no row.
CREATE OR REPLACE FUNCTION mtad_account_bounce(
    p_account integer, p_now timestamptz, p_data jsonb, p_floor integer, OUT health integer, OUT until timestamptz
) RETURNS SETOF record LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO events (at, kind, data)
    SELECT p_now, 'account_bounce', p_data || jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool)
    FROM accounts a WHERE a.id = p_account;
    RETURN QUERY SELECT r.health, r.until FROM mtad_account_rest(p_account, p_now, p_floor, true) r;
END
$$;
