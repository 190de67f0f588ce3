-- The health of account p_account at p_at, 0 to 100: 100 with nothing against it,
-- lowered by its bounces and complaints (account_bounce events) against its
-- confirmed sends over the 24 hours before p_at, and only since p_since (the
-- operator's last enable; NULL: none): round(100 * (sends + 1) / (sends + 1 +
-- bounces)). Its failures are the breaker's (mtad_account_failure), not its
-- health's. The sends are counted only when there is a bounce: an account with
-- none costs one probe of the events_account index.
CREATE OR REPLACE FUNCTION mtad_account_health(p_account integer, p_since timestamptz, p_at timestamptz)
RETURNS integer LANGUAGE plpgsql STABLE AS $$
DECLARE
    since timestamptz := greatest(p_at - interval '24 hours', p_since);
    bounces bigint;
    sends bigint;
BEGIN
    SELECT count(*) INTO bounces FROM events e
    WHERE e.kind = 'account_bounce' AND (e.data ->> 'account')::integer = p_account AND e.at > since;
    IF bounces = 0 THEN
        RETURN 100;
    END IF;
    SELECT count(*) INTO sends FROM account_reservations r
    WHERE r.account = p_account AND r.state = 'confirmed' AND r.reserved_at > since;
    RETURN round(100.0 * (sends + 1) / (sends + 1 + bounces));
END
$$;
