-- Reserve a send of p_want recipients through account p_account at p_now (NULL:
-- PostgreSQL's clock, clock_timestamp(), the one clock every node shares), or say
-- why not. Call it alone, in a transaction of its own (autocommit), at READ
-- COMMITTED: each statement below then reads what was committed when it started,
-- and the lock is released when the call's transaction ends. It waits for no lock
-- but its delivery's campaign's row, when that has limits (mtad_choose locks those
-- first, in id order).
--
-- p_draw: a uniform random number in [0, 1] drawn by the caller; this send's jitter
-- is gap_jitter_low + p_draw * (gap_jitter_high - gap_jitter_low). p_delivery,
-- p_node: the delivery that sends it and its node, so that the send holds the
-- mailbox while its lease does (mtad_send_free_at).
--
-- answer, checked in this order (reservation is set only for 'reserved'; retry_at
-- is the earliest time the answer could change, NULL when unknown):
--   'skipped-locked'       another transaction holds the account's lock right now;
--                          try another account (retry_at NULL)
--   'missing'              no account has this id
--   'skipped-disabled'     disabled or disconnected: until state_until, or until
--                          an operator changes it (retry_at NULL)
--   'skipped-cooldown'     cooling, parked, tripped or resting, until retry_at (state_until)
--   'skipped-daily-limit'  daily_cap recipients in the account's day (account_days);
--                          retry_at is the next 00:00 in its time zone
--   'skipped-sending'      the latest send has not settled; retry_at is the soonest
--                          its gap could end (were it settled now)
--   'skipped-gap'          the gap after the latest send (from when it was settled)
--                          has not passed yet
--   'skipped-rate'         per_second, per_minute or per_hour recipients in the
--                          window that ends at p_now; retry_at is when one leaves it
--   'skipped-campaign-limit'  the campaign of p_delivery is at its max_per_day or
--                          max_per_hour (UTC); retry_at is the next day or hour
--   'reserved'             a reservation was inserted: reservation is its id,
--                          granted (1..p_want) the recipients it reserved, as many
--                          as the daily and rate caps allow (the caller sends that
--                          many and leaves the rest for later), reserved_at its time
--
-- The first reservation after a timed state (cooling, parked, tripped, resting) ended moves
-- the stored state back to 'active' with its account_state event, and says so in
-- `lapsed` (the state that ended), so that an account's return is recorded like
-- its departure.
--
-- A send of a campaign with limits takes its campaign's slot in the same reservation,
-- after the mailbox's checks, under the campaign's row lock (as leases/begin.sql
-- counts MX sends): neither slot is taken when the other is refused, and `granted`
-- is within both. A released reservation gives both back (accounts/release.sql).
--
-- What counts: every reservation but released ones, confirmed or not. Reservations
-- stamped later than p_now (by a node whose clock runs ahead) count against the
-- gap and the rates, which errs towards sending less.
--
-- enable_seqscan = off: every statement below reads one account's rows through an
-- index, and a plan cached while account_reservations was nearly empty could
-- otherwise be a sequential scan, kept for the life of the connection, that reads
-- every account's reservations at every call.
CREATE OR REPLACE FUNCTION mtad_reserve(
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
    limited record;
    counted_campaign bigint;  -- the campaign whose slot this reservation takes
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

    IF p_delivery IS NOT NULL THEN  -- its campaign's slot, when it has limits
        SELECT c.id, c.max_per_hour, c.max_per_day,
               (SELECT coalesce(sum(s.sends) FILTER (WHERE s.hour = date_trunc('hour', at, 'UTC')), 0)
                FROM campaign_sends s
                WHERE s.campaign = c.id AND s.hour >= date_trunc('day', at, 'UTC')) AS hour,
               (SELECT coalesce(sum(s.sends), 0) FROM campaign_sends s
                WHERE s.campaign = c.id AND s.hour >= date_trunc('day', at, 'UTC')) AS day
        INTO limited
        FROM campaigns c
        WHERE c.id = (SELECT d.campaign FROM deliveries d WHERE d.id = p_delivery)
          AND (c.max_per_hour IS NOT NULL OR c.max_per_day IS NOT NULL) AND c.state = 'active'
        FOR UPDATE OF c;
        IF FOUND THEN
            IF limited.day >= limited.max_per_day THEN
                answer := 'skipped-campaign-limit';
                retry_at := date_trunc('day', at, 'UTC') + interval '1 day';
                RETURN;
            ELSIF limited.hour >= limited.max_per_hour THEN
                answer := 'skipped-campaign-limit';
                retry_at := date_trunc('hour', at, 'UTC') + interval '1 hour';
                RETURN;
            END IF;
            allowed := least(allowed, limited.max_per_day - limited.day, limited.max_per_hour - limited.hour);
            counted_campaign := limited.id;
        END IF;
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
    INSERT INTO account_reservations (account, reserved_at, next_gap, delivery, node, recipients, campaign)
    VALUES (p_account, at, coalesce(a.min_gap, 0) + jitter, p_delivery, p_node, allowed, counted_campaign)
    RETURNING id INTO reservation;
    IF counted_campaign IS NOT NULL THEN
        INSERT INTO campaign_sends AS s (campaign, hour, sends)
        VALUES (counted_campaign, date_trunc('hour', at, 'UTC'), allowed)
        ON CONFLICT (campaign, hour) DO UPDATE SET sends = s.sends + excluded.sends;
    END IF;
    INSERT INTO account_days AS d (account, day, sends)
    VALUES (p_account, (at AT TIME ZONE a.time_zone)::date, allowed)
    ON CONFLICT ON CONSTRAINT account_days_pkey DO UPDATE SET sends = d.sends + allowed;
    granted := allowed;
    reserved_at := at;
    answer := 'reserved';
END
$$;
