-- Relay through sending mailboxes: the account pool a message chose, what an
-- account needs for XOAUTH2, the account events the breaker and the health score
-- read, and the suppression list that recipient bounces write.
--
-- Its functions are as this migration wrote them; their current text is in
-- mtad/sql/functions/, applied after the migrations.

-- Submission: the account pool a message chose (X-Mtad-Account-Pool, or its
-- tenant's [tenants."NAME"] account_pool). NULL: none chosen at submission; the
-- route's ([routes."d"] account_pool) then counts, else the mail goes to MX.
ALTER TABLE messages ADD COLUMN account_pool text;

-- XOAUTH2 (Google, Microsoft): the OAuth client the account's refresh token was
-- issued to. The refresh token itself is the account's sealed `secret`.
ALTER TABLE accounts
    ADD COLUMN oauth_token_url     text,   -- the token endpoint (https, or http on loopback)
    ADD COLUMN oauth_client_id     text,
    ADD COLUMN oauth_client_secret bytea,  -- sealed by mtad.vault, like `secret`; NULL: a public client
    ADD COLUMN oauth_scope         text;   -- Microsoft asks for one; NULL: none sent

COMMENT ON COLUMN account_reservations.delivery IS
    'deliveries.id of the send (the first recipient of its transaction), set when it is confirmed';

-- The breaker counts the system's successes in its window: confirmed sends of
-- every account.
CREATE INDEX account_reservations_confirmed ON account_reservations (reserved_at) WHERE state = 'confirmed';

-- Account events live in `events` with the account's id in data->>'account':
--   account_state    a move from one state to another (from, to, until, reason)
--   account_failure  a send that failed on the account's side (class, reply or failure)
--   account_bounce   a send refused for its recipient or content (lowers the health score)
--   account_pool     an account pool paused (no account can send) or resumed
CREATE INDEX events_account ON events (((data ->> 'account')::integer), at)
    WHERE kind IN ('account_state', 'account_failure', 'account_bounce');

-- Addresses a tenant must not send to again: written with the bounce of a
-- recipient the receiver says does not exist (5.1.x), in the same statement.
CREATE TABLE suppressions (
    tenant     text NOT NULL,
    address    text NOT NULL,          -- the recipient as it was bounced
    reason     text NOT NULL,          -- the reply that put it here
    delivery   bigint,                 -- the delivery whose bounce put it here
    created_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, address)
);

-- An account's state moves, with its event: to p_state until p_until (NULL: until
-- changed) because of p_reason, if the state it is in at p_now is one of p_from
-- (mtad.accounts.TRANSITIONS). Returns the account's id and the state it was in,
-- or no row when it does not exist or the move is not allowed. The row lock taken
-- by the UPDATE orders two moves of one account; each writes the state it saw.
CREATE FUNCTION mtad_account_move(
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
    UPDATE accounts SET state = p_state, state_until = p_until, state_reason = p_reason, updated_at = p_now
    WHERE accounts.id = a.id;
    INSERT INTO events (at, kind, data)
    VALUES (p_now, 'account_state', jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool,
                                                      'from', was, 'to', p_state, 'until', p_until,
                                                      'reason', p_reason));
    RETURN NEXT;
END
$$;

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
CREATE FUNCTION mtad_account_failure(
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

-- When a send was settled: confirmed after the receiver's 250, or kept after a
-- quota or rate reply or an outcome left unknown (NULL: in flight, or never told).
-- The gap to the account's next send runs from here when it is later than the
-- reservation (see mtad_reserve below), so that the gap holds at the receiver and
-- not only between two reservations: a first send that opens a session, logs in
-- and only then arrives, followed by one over the warm session, would otherwise
-- arrive closer together than the gap.
ALTER TABLE account_reservations ADD COLUMN settled_at timestamptz;

-- Sends per account and day (in the account's time zone): what the daily cap and
-- least-used-first read, so that neither counts a day's reservations at every
-- call (a mailbox that sends thousands a day made every choice slower through
-- the day). Kept by mtad_reserve (+1) and accounts/release (-1), in the same
-- transaction as the reservation they count.
CREATE TABLE account_days (
    account integer NOT NULL REFERENCES accounts (id),
    day     date NOT NULL,                           -- in the account's time zone
    sends   integer NOT NULL CHECK (sends >= 0),     -- its reservations that day
    PRIMARY KEY (account, day)
);
INSERT INTO account_days (account, day, sends)
SELECT r.account, (r.reserved_at AT TIME ZONE a.time_zone)::date, count(*)
FROM account_reservations r JOIN accounts a ON a.id = r.account
GROUP BY 1, 2;

-- The sends of account p_account on the day containing p_at in time zone p_zone.
CREATE FUNCTION mtad_account_sends(p_account integer, p_zone text, p_at timestamptz)
RETURNS integer LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT d.sends FROM account_days d
                     WHERE d.account = p_account AND d.day = (p_at AT TIME ZONE p_zone)::date), 0)
$$;

-- When the gap after a send ends: next_gap seconds after it was reserved, or after
-- it was settled when that is later (a send without a gap ends none).
CREATE FUNCTION mtad_gap_end(reserved_at timestamptz, settled_at timestamptz, next_gap double precision)
RETURNS timestamptz LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN next_gap > 0 THEN greatest(reserved_at, settled_at) + make_interval(secs => next_gap)
                ELSE reserved_at END
$$;

-- mtad_reserve of migration 0006 (see there for the answers), with three changes:
-- the gap runs from greatest(reserved_at, settled_at); the day's sends are read
-- from (and counted in) account_days; and the first reservation
-- after a timed state (cooling, parked, tripped) ended moves the stored state back
-- to 'active' with its account_state event, and says so in `lapsed` (the state
-- that ended), so that an account's return is recorded like its departure.
DROP FUNCTION mtad_reserve(integer, timestamptz, double precision);
CREATE FUNCTION mtad_reserve(
    p_account integer, p_now timestamptz, p_draw double precision,
    OUT answer text, OUT reservation bigint, OUT retry_at timestamptz, OUT lapsed text
) LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    -- The first half of every account lock key (two int4 keys, a space that the
    -- single bigint keys of other advisory locks, such as migrations', never share).
    lock_class CONSTANT integer := 1835098979;  -- 'macc'
    a accounts%ROWTYPE;
    day tstzrange;
    used bigint;
    free_at timestamptz;
    jitter double precision := 0;
    rate record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(lock_class, p_account) THEN
        answer := 'skipped-locked';
        RETURN;
    END IF;

    SELECT * INTO a FROM accounts WHERE id = p_account;
    IF NOT FOUND THEN
        answer := 'missing';
        RETURN;
    END IF;
    IF mtad_account_state_at(a.state, a.state_until, p_now) <> 'active' THEN
        answer := CASE WHEN a.state IN ('disabled', 'disconnected') THEN 'skipped-disabled' ELSE 'skipped-cooldown' END;
        retry_at := a.state_until;
        RETURN;
    END IF;

    IF a.daily_cap IS NOT NULL THEN
        day := mtad_account_day(a.time_zone, p_now);
        used := mtad_account_sends(p_account, a.time_zone, p_now);
        IF used >= a.daily_cap THEN
            answer := 'skipped-daily-limit';
            retry_at := upper(day);
            RETURN;
        END IF;
    END IF;

    -- Each send waited for the gap of the one before it, so the latest reservation's
    -- gap is the one that ends last. It runs from when the send was settled (the
    -- receiver's answer, or the failure that left its outcome unknown) when that is
    -- later than the reservation: the receiver then sees two sends at least the gap
    -- apart, however long the first one took to get there.
    -- An account without a gap (no min_gap, no jitter) skips the look.
    IF a.min_gap IS NOT NULL OR a.gap_jitter_low IS NOT NULL THEN
        SELECT mtad_gap_end(r.reserved_at, r.settled_at, r.next_gap) INTO free_at
        FROM account_reservations r
        WHERE r.account = p_account ORDER BY r.reserved_at DESC LIMIT 1;
        IF free_at > p_now THEN
            answer := 'skipped-gap';
            retry_at := free_at;
            RETURN;
        END IF;
    END IF;

    IF coalesce(a.per_second, a.per_minute, a.per_hour) IS NOT NULL THEN  -- no query for an account without
        FOR rate IN
            SELECT cap, width FROM (VALUES (a.per_second, interval '1 second'), (a.per_minute, interval '1 minute'),
                                           (a.per_hour, interval '1 hour')) AS caps (cap, width)
            WHERE cap IS NOT NULL
        LOOP
            SELECT count(*) INTO used FROM account_reservations
            WHERE account = p_account AND reserved_at > p_now - rate.width;
            IF used >= rate.cap THEN
                -- The window admits one more send when its (used - cap + 1)-th oldest leaves it.
                SELECT r.reserved_at + rate.width INTO retry_at FROM account_reservations r
                WHERE r.account = p_account AND r.reserved_at > p_now - rate.width
                ORDER BY r.reserved_at OFFSET used - rate.cap LIMIT 1;
                answer := 'skipped-rate';
                RETURN;
            END IF;
        END LOOP;
    END IF;

    IF a.state <> 'active' THEN  -- a timed state that has ended (else the account was refused above)
        UPDATE accounts SET state = 'active', state_until = NULL, updated_at = p_now,
                            state_reason = format('%s ended at %s', a.state, a.state_until)
        WHERE id = p_account;
        INSERT INTO events (at, kind, data)
        VALUES (p_now, 'account_state', jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool,
                                                          'from', a.state, 'to', 'active', 'until', NULL,
                                                          'reason', format('%s ended', a.state)));
        lapsed := a.state::text;
    END IF;
    IF a.gap_jitter_low IS NOT NULL THEN
        jitter := a.gap_jitter_low + greatest(0, least(1, p_draw)) * (a.gap_jitter_high - a.gap_jitter_low);
    END IF;
    INSERT INTO account_reservations (account, reserved_at, next_gap)
    VALUES (p_account, p_now, coalesce(a.min_gap, 0) + jitter)
    RETURNING id INTO reservation;
    INSERT INTO account_days AS d (account, day, sends)
    VALUES (p_account, (p_now AT TIME ZONE a.time_zone)::date, 1)
    ON CONFLICT ON CONSTRAINT account_days_pkey DO UPDATE SET sends = d.sends + 1;
    answer := 'reserved';
END
$$;

-- Reserve up to p_want sends through the accounts of pool p_pool at p_now, least
-- used first, in one round trip and one transaction: the accounts that may send as
-- far as this snapshot can tell (in an active state, past the gap after their
-- latest send, under the daily cap), by fewest sends today (in each account's time
-- zone), then longest since the latest send (never first), then id, are tried with
-- mtad_reserve in that order, and again in passes (the accounts that took one in
-- the pass before), until p_want are reserved or a pass reserves none; mtad_reserve
-- sees this transaction's own reservations, so every limit holds within a batch.
-- The cheap tests come first (an index probe per account for its latest send, its
-- day's count from account_days). p_draws[i]: the caller's uniform draw in [0, 1]
-- for the i-th reservation's jitter.
--
-- One row per reservation (account, reservation, lapsed as mtad_reserve answers),
-- or, when none was made, one row with account NULL and contended: whether an
-- account was skipped because another caller held its lock (trying again at once
-- may succeed). Call it alone, in a transaction of its own: the locks mtad_reserve
-- takes on the accounts it tries are held until it returns.
CREATE FUNCTION mtad_choose(p_pool text, p_now timestamptz, p_want integer, p_draws double precision[])
RETURNS TABLE (account integer, reservation bigint, lapsed text, contended boolean)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    candidates integer[];
    next_pass integer[];
    candidate integer;
    tried record;
    got integer := 0;
    was_contended boolean := false;
BEGIN
    candidates := ARRAY(
        WITH free AS MATERIALIZED (
            SELECT a.id, latest.reserved_at AS last_send
            FROM accounts a
            LEFT JOIN LATERAL (
                SELECT r.reserved_at,
                       mtad_gap_end(r.reserved_at, r.settled_at, r.next_gap) AS free_at
                FROM account_reservations r
                WHERE r.account = a.id ORDER BY r.reserved_at DESC LIMIT 1
            ) latest ON true
            WHERE a.pool = p_pool
              AND mtad_account_state_at(a.state, a.state_until, p_now) = 'active'
              AND (latest.reserved_at IS NULL OR latest.free_at <= p_now)
        )
        SELECT a.id
        FROM free
        JOIN accounts a ON a.id = free.id
        CROSS JOIN LATERAL (SELECT mtad_account_sends(a.id, a.time_zone, p_now) AS sends) today
        WHERE a.daily_cap IS NULL OR today.sends < a.daily_cap
        ORDER BY today.sends, free.last_send NULLS FIRST, a.id
    );
    WHILE got < p_want AND cardinality(candidates) > 0 LOOP
        next_pass := '{}';
        FOREACH candidate IN ARRAY candidates LOOP
            EXIT WHEN got >= p_want;
            SELECT * INTO tried FROM mtad_reserve(candidate, p_now, coalesce(p_draws[got + 1], 0));
            IF tried.answer = 'reserved' THEN
                got := got + 1;
                next_pass := next_pass || candidate;
                account := candidate;
                reservation := tried.reservation;
                lapsed := tried.lapsed;
                contended := false;
                RETURN NEXT;
            ELSIF tried.answer = 'skipped-locked' THEN
                was_contended := true;
            END IF;
        END LOOP;
        candidates := next_pass;
    END LOOP;
    IF got = 0 THEN
        account := NULL;
        reservation := NULL;
        lapsed := NULL;
        contended := was_contended;
        RETURN NEXT;
    END IF;
END
$$;
