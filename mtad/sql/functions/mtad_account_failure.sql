-- A send through account p_account failed on the account's side at p_now (p_data:
-- the class and the reply or local failure, for the event). Writes the
-- account_failure event, then runs the circuit breaker: when the account has had
-- p_threshold failures in the p_window before p_now (since its last trip), and
-- the whole system had at least p_min_successes confirmed sends in that window
-- (so a general outage trips no account), the account is tripped for p_trip; its
-- p_trips_per_day-th trip in its day disconnects it instead (until an operator
-- enables it). Returns the state it moved to ('tripped', 'disconnected'), else NULL.
-- Under the account's lock (the same key as mtad_reserve's, waited for here: the
-- transaction is short), so that two nodes seeing the same failures trip it once.
CREATE OR REPLACE FUNCTION mtad_account_failure(
    p_account integer, p_now timestamptz, p_data jsonb, p_window interval, p_threshold integer,
    p_min_successes integer, p_trip interval, p_trips_per_day integer
) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    lock_class CONSTANT integer := 1835098979;  -- 'macc', as in mtad_reserve
    a accounts%ROWTYPE;
    last_trip timestamptz;
    failures bigint;
    successes bigint;
    trips bigint;
    day tstzrange;
    moved account_state;
    until timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(lock_class, p_account);
    SELECT * INTO a FROM accounts WHERE id = p_account;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO events (at, kind, data)
    VALUES (p_now, 'account_failure', p_data || jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool));
    IF mtad_account_state_at(a.state, a.state_until, p_now) <> 'active' THEN
        RETURN NULL;  -- already out of the rotation
    END IF;
    SELECT max(e.at) INTO last_trip FROM events e
    WHERE e.kind = 'account_state' AND (e.data ->> 'account')::integer = p_account AND e.data ->> 'to' = 'tripped';
    SELECT count(*) INTO failures FROM events e
    WHERE e.kind = 'account_failure' AND (e.data ->> 'account')::integer = p_account
      AND e.at > greatest(p_now - p_window, coalesce(last_trip, '-infinity')) AND e.at <= p_now;
    IF failures < p_threshold THEN
        RETURN NULL;
    END IF;
    SELECT count(*) INTO successes FROM account_reservations r
    WHERE r.state = 'confirmed' AND r.reserved_at > p_now - p_window AND r.reserved_at <= p_now;
    IF successes < p_min_successes THEN
        RETURN NULL;  -- the whole system is failing: not this account's fault
    END IF;
    day := mtad_account_day(a.time_zone, p_now);
    SELECT count(*) INTO trips FROM events e
    WHERE e.kind = 'account_state' AND (e.data ->> 'account')::integer = p_account AND e.data ->> 'to' = 'tripped'
      AND e.at >= lower(day) AND e.at < upper(day);
    IF trips + 1 >= p_trips_per_day THEN
        moved := 'disconnected';
    ELSE
        moved := 'tripped';
        until := p_now + p_trip;
    END IF;
    UPDATE accounts SET state = moved, state_until = until, updated_at = p_now,
                        state_reason = format('%s failures in %s', failures, p_window)
    WHERE id = p_account;
    INSERT INTO events (at, kind, data)
    VALUES (p_now, 'account_state', jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool,
                                                      'from', 'active', 'to', moved, 'until', until,
                                                      'reason', format('%s failures in %s', failures, p_window),
                                                      'trips_today', trips + 1));
    RETURN moved::text;
END
$$;
