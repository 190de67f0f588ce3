-- The recipients reserved through account p_account on the day containing p_at in
-- time zone p_zone (account_days, kept by mtad_reserve and accounts/release).
CREATE OR REPLACE FUNCTION mtad_account_sends(p_account integer, p_zone text, p_at timestamptz)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT d.sends FROM account_days d
                     WHERE d.account = p_account AND d.day = (p_at AT TIME ZONE p_zone)::date), 0)
$$;
