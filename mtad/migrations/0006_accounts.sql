-- Accounts: the sending mailboxes mail is relayed through (mtad.accounts), and
-- the reservations that keep each one inside its limits.
--
-- Every send through an account is first reserved by mtad_reserve() below, in a
-- short transaction of its own, under a transaction-scoped advisory lock on the
-- account: the daily cap, the minimum gap and the caps per second, minute and
-- hour are decided on committed data in PostgreSQL, so they hold across every
-- coroutine, process and node that shares the database. Sends are counted by
-- their reservations: a reservation is a send (confirmed after a 250, or not yet
-- known to have gone out); a released one is deleted and counts no more.
--
-- Its functions are as this migration wrote them; their current text is in
-- mtad/sql/functions/, applied after the migrations.

-- Mirrors mtad.accounts.State (tests check that they agree). A state other than
-- 'active' ends at state_until when that is set (the account is then treated as
-- active: mtad_account_state_at), and lasts until changed when it is NULL.
CREATE TYPE account_state AS ENUM (
    'active',        -- may send, within its limits
    'disabled',      -- an operator turned it off
    'disconnected',  -- the provider refused its credentials (535, revoked token): until an operator re-enables it
    'parked',        -- the provider's daily quota is used up: until the day resets
    'cooling',       -- the provider throttled it (421, 429, 4.7.x): cooling down until state_until
    'tripped'        -- its circuit breaker opened after repeated failures: until state_until
);

CREATE TABLE accounts (
    id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                    -- integer, not bigint: the second half of the account's advisory lock key
    name            text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$'),
                    -- chosen by the operator: `mtad accounts show NAME`
    address         text NOT NULL CHECK (address ~ '^[^@\s]+@[^@\s]+$'),  -- the mailbox: local@domain
    pool            text NOT NULL CHECK (pool ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'),  -- its account pool
    host            text NOT NULL CHECK (host <> ''),  -- the smarthost (its certificate is verified)
    port            integer NOT NULL CHECK (port BETWEEN 1 AND 65535),  -- 587, 465, ...
    tls             text NOT NULL CHECK (tls IN ('starttls', 'implicit')),  -- STARTTLS, or TLS from the start
    login           text NOT NULL CHECK (login <> ''),  -- the user name for AUTH
    mechanism       text NOT NULL CHECK (mechanism IN ('plain', 'login', 'xoauth2')),  -- the AUTH mechanism
    secret          bytea,  -- the password or OAuth token, sealed by mtad.vault with the key named in
                            -- [accounts] (never stored in the database); NULL: none stored yet
    state           account_state NOT NULL DEFAULT 'active',  -- whether it may send (see account_state)
    state_until     timestamptz,  -- when a state other than 'active' ends; NULL: when it is changed
    state_reason    text,         -- why the account entered its state (a reply, an operator's note)
    daily_cap       integer CHECK (daily_cap > 0),                 -- sends per day in time_zone; NULL: no cap
    min_gap         double precision CHECK (min_gap >= 0),         -- seconds between two sends; NULL: no gap
    gap_jitter_low  double precision CHECK (gap_jitter_low >= 0),  -- a jitter in [low, high] seconds, drawn per
    gap_jitter_high double precision,                              -- send, is added to min_gap; NULL: none
    per_second      integer CHECK (per_second > 0),  -- sends in any window of one second; NULL: no cap
    per_minute      integer CHECK (per_minute > 0),  -- sends in any window of one minute; NULL: no cap
    per_hour        integer CHECK (per_hour > 0),    -- sends in any window of one hour; NULL: no cap
    time_zone       text NOT NULL DEFAULT 'UTC'      -- the daily cap resets at 00:00 here (an IANA name)
                    CHECK ((timestamptz '2000-01-01 00:00+00' AT TIME ZONE time_zone) IS NOT NULL),
    created_at      timestamptz NOT NULL DEFAULT now(),  -- when `mtad accounts add` stored it
    updated_at      timestamptz NOT NULL DEFAULT now(),  -- the last change of any column
    CONSTRAINT gap_jitter_range CHECK (
        (gap_jitter_low IS NULL) = (gap_jitter_high IS NULL) AND gap_jitter_high >= gap_jitter_low
    ),
    CONSTRAINT active_has_no_end CHECK (state <> 'active' OR state_until IS NULL)
);
-- Selection: the accounts of a pool.
CREATE INDEX accounts_pool ON accounts (pool);

-- Mirrors mtad.accounts.ReservationState.
CREATE TYPE reservation_state AS ENUM (
    'reserved',   -- taken before the send; the outcome is not known yet (or never will be: it still counts)
    'confirmed'   -- the receiver answered 250
);

-- One row per send through an account (see the top of this file). Rows are never
-- updated except to confirm them; a released reservation is deleted.
CREATE TABLE account_reservations (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- what confirm and release name
    account     integer NOT NULL REFERENCES accounts (id),        -- the account that sends
    reserved_at timestamptz NOT NULL,                             -- the time the limits count the send at
    next_gap    double precision NOT NULL CHECK (next_gap >= 0),
                -- seconds the account's next send must wait after this one: min_gap plus the jitter
                -- drawn for this send, kept with the account's sends so that every node waits the same
    state       reservation_state NOT NULL DEFAULT 'reserved',  -- confirmed after a 250; counts either way
    delivery    bigint  -- deliveries.id of the send; NULL until delivery is wired in
);
-- Every check of mtad_reserve: an account's reservations in a time range, and its latest.
CREATE INDEX account_reservations_account ON account_reservations (account, reserved_at);

-- The state an account is in at `at`: its stored state, or 'active' once the
-- stored state's end time has passed.
CREATE FUNCTION mtad_account_state_at(state account_state, state_until timestamptz, at timestamptz)
RETURNS account_state LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN state_until IS NOT NULL AND state_until <= at THEN 'active'::account_state ELSE state END
$$;

-- The day containing `at` in the time zone `zone`: [00:00, next 00:00) local time,
-- 23 or 25 hours long on the days clocks change.
CREATE FUNCTION mtad_account_day(zone text, at timestamptz)
RETURNS tstzrange LANGUAGE sql STABLE AS $$
    SELECT tstzrange(((at AT TIME ZONE zone)::date)::timestamp AT TIME ZONE zone,
                     ((at AT TIME ZONE zone)::date + 1)::timestamp AT TIME ZONE zone)
$$;

-- Reserve one send through account p_account at time p_now, or say why not.
-- Call it alone, in a transaction of its own (autocommit), at READ COMMITTED: each
-- statement below then reads what was committed when it started, and the lock is
-- released when the call's transaction ends. It never waits for a lock.
--
-- p_draw: a uniform random number in [0, 1] drawn by the caller; this send's jitter
-- is gap_jitter_low + p_draw * (gap_jitter_high - gap_jitter_low).
--
-- answer, checked in this order (reservation is set only for 'reserved'; retry_at
-- is the earliest time the answer could change, NULL when unknown):
--   'skipped-locked'       another transaction holds the account's lock right now;
--                          try another account (retry_at NULL)
--   'missing'              no account has this id
--   'skipped-disabled'     disabled or disconnected: until state_until, or until
--                          an operator changes it (retry_at NULL)
--   'skipped-cooldown'     cooling, parked or tripped, until retry_at (state_until)
--   'skipped-daily-limit'  daily_cap sends in the account's day; retry_at is the
--                          next 00:00 in its time zone
--   'skipped-gap'          the latest reservation's next_gap has not passed yet
--   'skipped-rate'         per_second, per_minute or per_hour sends in the window
--                          that ends at p_now; retry_at is when one leaves it
--   'reserved'             a reservation was inserted: reservation is its id
--
-- What counts: every row of account_reservations, confirmed or not. Reservations
-- stamped later than p_now (by a node whose clock runs ahead) count against the
-- gap and the rates, which errs towards sending less.
--
-- enable_seqscan = off: every statement below reads one account's rows through an
-- index, and a plan cached while account_reservations was nearly empty could
-- otherwise be a sequential scan, kept for the life of the connection, that reads
-- every account's reservations at every call. (Planning each call afresh with
-- plan_cache_mode = force_custom_plan cost a third more per call.)
CREATE FUNCTION mtad_reserve(
    p_account integer, p_now timestamptz, p_draw double precision,
    OUT answer text, OUT reservation bigint, OUT retry_at timestamptz
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
        SELECT count(*) INTO used FROM account_reservations
        WHERE account = p_account AND reserved_at >= lower(day) AND reserved_at < upper(day);
        IF used >= a.daily_cap THEN
            answer := 'skipped-daily-limit';
            retry_at := upper(day);
            RETURN;
        END IF;
    END IF;

    -- Each send waited for the gap of the one before it, so the latest reservation's
    -- gap is the one that ends last.
    SELECT r.reserved_at + make_interval(secs => r.next_gap) INTO free_at FROM account_reservations r
    WHERE r.account = p_account ORDER BY r.reserved_at DESC LIMIT 1;
    IF free_at > p_now THEN
        answer := 'skipped-gap';
        retry_at := free_at;
        RETURN;
    END IF;

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

    IF a.gap_jitter_low IS NOT NULL THEN
        jitter := a.gap_jitter_low + greatest(0, least(1, p_draw)) * (a.gap_jitter_high - a.gap_jitter_low);
    END IF;
    INSERT INTO account_reservations (account, reserved_at, next_gap)
    VALUES (p_account, p_now, coalesce(a.min_gap, 0) + jitter)
    RETURNING id INTO reservation;
    answer := 'reserved';
END
$$;
