-- Mailbox limits that hold when the provider is slow or stalls: a send that is
-- reserved but not settled holds its mailbox (when it has a gap) until it settles or
-- its lease says it is gone; recipients count against the daily and rate caps; and
-- the times compared come from PostgreSQL's clock unless a caller gives its own.
--
-- Its functions are as this migration wrote them; their current text is in
-- mtad/sql/functions/, applied after the migrations.

ALTER TABLE account_reservations
    ADD COLUMN node       text,  -- the node whose delivery sends it; NULL: reserved outside delivery
    ADD COLUMN recipients integer NOT NULL DEFAULT 1 CHECK (recipients > 0);  -- what it counts against the caps
COMMENT ON COLUMN account_reservations.delivery IS
    'deliveries.id of the send (the first recipient of its transaction), set when it is reserved';
COMMENT ON COLUMN account_reservations.settled_at IS
    'when the send was settled (250, a quota or rate reply, an outcome left unknown, its lease gone); NULL: in flight';

-- A send refused for its recipient or content, or that never began: it counts
-- against no cap (accounts/release), but the mailbox's gap still runs from it, since
-- the receiver may have seen it. Mirrors mtad.accounts.ReservationState.
ALTER TYPE reservation_state ADD VALUE 'released';

-- Sends reserved by earlier versions were never held while in flight: they count as
-- settled when they were reserved.
UPDATE account_reservations SET settled_at = reserved_at WHERE settled_at IS NULL;

-- The sends in flight, by delivery: what the reaper settles when their leases expire.
CREATE INDEX account_reservations_in_flight ON account_reservations (delivery) WHERE settled_at IS NULL;

-- When the gap after a send still in flight ends, at p_now: NULL while it may still
-- be on the wire, since the receiver must see the gap from its answer: while its
-- delivery is leased to its node and the lease has not ended. Then it counts as
-- settled when the lease ended (a maybe-sent send keeps its slot); a send whose
-- delivery left its node otherwise, at the delivery's last change; one reserved
-- outside delivery is held for 15 minutes at most. (A lease's end is its node's
-- clock plus lease_duration, renewed every third of it: only a clock minutes behind
-- could end it while the send goes on.)
CREATE FUNCTION mtad_unsettled_free_at(
    p_reserved_at timestamptz, p_next_gap double precision, p_delivery bigint, p_node text, p_now timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN gone > p_now THEN NULL ELSE gone + make_interval(secs => p_next_gap) END
    FROM (
        SELECT CASE
            WHEN p_delivery IS NULL THEN p_reserved_at + interval '15 minutes'
            ELSE coalesce((SELECT CASE WHEN d.state::text = 'leased' AND d.lease_owner = p_node
                                       THEN d.lease_expires_at
                                       ELSE greatest(p_reserved_at, d.updated_at) END
                           FROM deliveries d WHERE d.id = p_delivery), p_reserved_at)
        END AS gone
    ) held
$$;

-- When the gap after a send ends, at p_now: next_gap seconds after it was settled
-- (or reserved, if later); a send without a gap ends none; NULL while a send with a
-- gap is in flight (mtad_unsettled_free_at, reached only then: this one is inlined).
CREATE FUNCTION mtad_send_free_at(
    p_reserved_at timestamptz, p_settled_at timestamptz, p_next_gap double precision, p_delivery bigint,
    p_node text, p_now timestamptz
) RETURNS timestamptz LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_next_gap <= 0 THEN p_reserved_at
        WHEN p_settled_at IS NOT NULL THEN greatest(p_reserved_at, p_settled_at) + make_interval(secs => p_next_gap)
        ELSE mtad_unsettled_free_at(p_reserved_at, p_next_gap, p_delivery, p_node, p_now)
    END
$$;
DROP FUNCTION mtad_gap_end(timestamptz, timestamptz, double precision);

-- mtad_reserve of migration 0007 (see 0006 for the answers), with these changes:
--   p_now NULL: PostgreSQL's clock (clock_timestamp()), the one clock every node shares;
--   p_want recipients are asked for, and `granted` (1..p_want) are reserved: as many
--   as the daily cap and the per-second, minute and hour caps still allow, which
--   count recipients; the caller sends that many and leaves the rest for later;
--   p_delivery, p_node: the delivery that sends it and its node, so that the send
--   holds the mailbox while its lease does (mtad_send_free_at);
--   'skipped-sending': the latest send has not settled; retry_at is the soonest its
--   gap could end (were it settled now).
DROP FUNCTION mtad_reserve(integer, timestamptz, double precision);
CREATE FUNCTION mtad_reserve(
    p_account integer, p_now timestamptz, p_draw double precision, p_want integer DEFAULT 1,
    p_delivery bigint DEFAULT NULL, p_node text DEFAULT NULL,
    OUT answer text, OUT reservation bigint, OUT retry_at timestamptz, OUT lapsed text, OUT granted integer,
    OUT reserved_at timestamptz
) LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    lock_class CONSTANT integer := 1835098979;  -- 'macc', the first half of every account lock key
    a accounts%ROWTYPE;
    at timestamptz;
    day tstzrange;
    used bigint;
    latest record;
    free_at timestamptz;
    jitter double precision := 0;
    rate record;
    allowed integer := greatest(1, coalesce(p_want, 1));  -- the recipients the caps leave room for
BEGIN
    IF NOT pg_try_advisory_xact_lock(lock_class, p_account) THEN
        answer := 'skipped-locked';
        RETURN;
    END IF;
    at := coalesce(p_now, clock_timestamp());  -- after the lock: every send before it is committed

    SELECT * INTO a FROM accounts WHERE id = p_account;
    IF NOT FOUND THEN
        answer := 'missing';
        RETURN;
    END IF;
    IF mtad_account_state_at(a.state, a.state_until, at) <> 'active' THEN
        answer := CASE WHEN a.state IN ('disabled', 'disconnected') THEN 'skipped-disabled' ELSE 'skipped-cooldown' END;
        retry_at := a.state_until;
        RETURN;
    END IF;

    IF a.daily_cap IS NOT NULL THEN
        day := mtad_account_day(a.time_zone, at);
        used := mtad_account_sends(p_account, a.time_zone, at);
        IF used >= a.daily_cap THEN
            answer := 'skipped-daily-limit';
            retry_at := upper(day);
            RETURN;
        END IF;
        allowed := least(allowed, a.daily_cap - used);
    END IF;

    -- Each send waited for the gap of the one before it, so the latest reservation's
    -- gap is the one that ends last; it runs from when that send was settled, and a
    -- send still in flight holds the mailbox. An account without a gap skips the look.
    IF a.min_gap IS NOT NULL OR a.gap_jitter_low IS NOT NULL THEN
        SELECT r.reserved_at, r.next_gap,
               mtad_send_free_at(r.reserved_at, r.settled_at, r.next_gap, r.delivery, r.node, at) AS free_at
        INTO latest
        FROM account_reservations r
        WHERE r.account = p_account ORDER BY r.reserved_at DESC LIMIT 1;
        IF FOUND AND latest.free_at IS NULL THEN
            answer := 'skipped-sending';
            retry_at := at + make_interval(secs => latest.next_gap);
            RETURN;
        ELSIF latest.free_at > at THEN
            answer := 'skipped-gap';
            retry_at := latest.free_at;
            RETURN;
        END IF;
    END IF;

    IF coalesce(a.per_second, a.per_minute, a.per_hour) IS NOT NULL THEN  -- no query for an account without
        FOR rate IN
            SELECT cap, width FROM (VALUES (a.per_second, interval '1 second'), (a.per_minute, interval '1 minute'),
                                           (a.per_hour, interval '1 hour')) AS caps (cap, width)
            WHERE cap IS NOT NULL
        LOOP
            SELECT coalesce(sum(r.recipients), 0) INTO used FROM account_reservations r
            WHERE r.account = p_account AND r.reserved_at > at - rate.width AND r.state::text <> 'released';
            IF used >= rate.cap THEN
                -- The window admits one more recipient once the oldest sends carrying
                -- used - cap + 1 recipients have left it.
                SELECT w.reserved_at + rate.width INTO retry_at
                FROM (SELECT r.reserved_at, sum(r.recipients) OVER (ORDER BY r.reserved_at, r.id) AS carried
                      FROM account_reservations r
                      WHERE r.account = p_account AND r.reserved_at > at - rate.width
                        AND r.state::text <> 'released') w
                WHERE w.carried >= used - rate.cap + 1
                ORDER BY w.reserved_at LIMIT 1;
                answer := 'skipped-rate';
                RETURN;
            END IF;
            allowed := least(allowed, rate.cap - used);
        END LOOP;
    END IF;

    IF a.state <> 'active' THEN  -- a timed state that has ended (else the account was refused above)
        UPDATE accounts SET state = 'active', state_until = NULL, updated_at = at,
                            state_reason = format('%s ended at %s', a.state, a.state_until)
        WHERE id = p_account;
        INSERT INTO events (at, kind, data)
        VALUES (at, 'account_state', jsonb_build_object('account', a.id, 'name', a.name, 'pool', a.pool,
                                                       'from', a.state, 'to', 'active', 'until', NULL,
                                                       'reason', format('%s ended', a.state)));
        lapsed := a.state::text;
    END IF;
    IF a.gap_jitter_low IS NOT NULL THEN
        jitter := a.gap_jitter_low + greatest(0, least(1, p_draw)) * (a.gap_jitter_high - a.gap_jitter_low);
    END IF;
    INSERT INTO account_reservations (account, reserved_at, next_gap, delivery, node, recipients)
    VALUES (p_account, at, coalesce(a.min_gap, 0) + jitter, p_delivery, p_node, allowed)
    RETURNING id INTO reservation;
    INSERT INTO account_days AS d (account, day, sends)
    VALUES (p_account, (at AT TIME ZONE a.time_zone)::date, allowed)
    ON CONFLICT ON CONSTRAINT account_days_pkey DO UPDATE SET sends = d.sends + allowed;
    granted := allowed;
    reserved_at := at;
    answer := 'reserved';
END
$$;

-- account_days.sends counts recipients from here on (each reservation's `recipients`).
COMMENT ON COLUMN account_days.sends IS 'recipients reserved through the account that day';

-- mtad_choose of migration 0007 (see there), with the changes of mtad_reserve above:
-- p_now NULL is PostgreSQL's clock (read once, for the whole call); the i-th
-- reservation asks for p_wants[i] recipients for delivery p_deliveries[i] of node
-- p_node, and says how many it got (`granted`) and when it was made.
DROP FUNCTION mtad_choose(text, timestamptz, integer, double precision[]);
CREATE FUNCTION mtad_choose(
    p_pool text, p_now timestamptz, p_wants integer[], p_draws double precision[], p_deliveries bigint[],
    p_node text
)
RETURNS TABLE (account integer, reservation bigint, lapsed text, contended boolean, granted integer,
               reserved_at timestamptz)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    at timestamptz := coalesce(p_now, clock_timestamp());
    want integer := coalesce(cardinality(p_wants), 0);
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
                       mtad_send_free_at(r.reserved_at, r.settled_at, r.next_gap, r.delivery, r.node, at) AS free_at
                FROM account_reservations r
                WHERE r.account = a.id ORDER BY r.reserved_at DESC LIMIT 1
            ) latest ON true
            WHERE a.pool = p_pool
              AND mtad_account_state_at(a.state, a.state_until, at) = 'active'
              AND (latest.reserved_at IS NULL OR latest.free_at <= at)
        )
        SELECT a.id
        FROM free
        JOIN accounts a ON a.id = free.id
        CROSS JOIN LATERAL (SELECT mtad_account_sends(a.id, a.time_zone, at) AS sends) today
        WHERE a.daily_cap IS NULL OR today.sends < a.daily_cap
        ORDER BY today.sends, free.last_send NULLS FIRST, a.id
    );
    WHILE got < want AND cardinality(candidates) > 0 LOOP
        next_pass := '{}';
        FOREACH candidate IN ARRAY candidates LOOP
            EXIT WHEN got >= want;
            SELECT * INTO tried FROM mtad_reserve(candidate, at, coalesce(p_draws[got + 1], 0), p_wants[got + 1],
                                                  p_deliveries[got + 1], p_node);
            IF tried.answer = 'reserved' THEN
                got := got + 1;
                next_pass := next_pass || candidate;
                account := candidate;
                reservation := tried.reservation;
                lapsed := tried.lapsed;
                contended := false;
                granted := tried.granted;
                reserved_at := tried.reserved_at;
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
        granted := NULL;
        reserved_at := NULL;
        RETURN NEXT;
    END IF;
END
$$;
