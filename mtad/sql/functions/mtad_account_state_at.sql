-- The state an account is in at `at`: its stored state, or 'active' once the
-- stored state's end time has passed.
CREATE OR REPLACE FUNCTION mtad_account_state_at(state account_state, state_until timestamptz, at timestamptz)
RETURNS account_state LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN state_until IS NOT NULL AND state_until <= at THEN 'active'::account_state ELSE state END
$$;
