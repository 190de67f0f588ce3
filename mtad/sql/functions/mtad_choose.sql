-- Reserve sends through the accounts of pool p_pool at p_now (NULL: PostgreSQL's
-- clock, read once for the whole call), least used first, in one round trip and
-- one transaction: the i-th reservation asks for p_wants[i] recipients for
-- delivery p_deliveries[i] of node p_node, with p_draws[i] the caller's uniform
-- draw in [0, 1] for its jitter. The accounts that may send as far as this
-- snapshot can tell (in an active state, past the gap after their latest send,
-- under the daily cap), by fewest sends today (in each account's time zone), then
-- longest since the latest send (never first), then id, are tried with
-- mtad_reserve in that order, and again in passes (the accounts that took one in
-- the pass before), until every want is reserved or a pass reserves none;
-- mtad_reserve sees this transaction's own reservations, so every limit holds
-- within a batch. The cheap tests come first (an index probe per account for its
-- latest send, its day's count from account_days). In the first pass an account
-- whose health is below p_floor (0: none is judged) is rested instead of tried
-- (mtad_account_rest: one more index probe per account tried). Wants are served in
-- order: a want whose campaign is at its limits (mtad_reserve's
-- 'skipped-campaign-limit') takes no account and is passed over, and the account
-- tries the next. The campaigns with limits of the wants are locked first, in id
-- order, as leases/begin.sql locks them: the accounts' locks are only ever tried.
--
-- One row per reservation (account, reservation, lapsed, granted, reserved_at as
-- mtad_reserve answers, and wanted: the want's index, from 1), one per want passed
-- over for its campaign's limits (wanted, and limited_until: the next hour or day),
-- and one per account rested (account, health and rested_until, reservation NULL);
-- when no reservation was made, a last row with
-- account NULL and contended: whether an account was skipped because another
-- caller held its lock (trying again at once may succeed). Call it alone, in a
-- transaction of its own: the locks mtad_reserve takes on the accounts it tries
-- are held until it returns.
CREATE OR REPLACE FUNCTION mtad_choose(
    p_pool text, p_now timestamptz, p_wants integer[], p_draws double precision[], p_deliveries bigint[],
    p_node text, p_floor integer
)
RETURNS TABLE (account integer, reservation bigint, lapsed text, contended boolean, granted integer,
               reserved_at timestamptz, health integer, rested_until timestamptz, wanted integer,
               limited_until timestamptz)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    at timestamptz := coalesce(p_now, clock_timestamp());
    want integer := coalesce(cardinality(p_wants), 0);
    candidates integer[];
    next_pass integer[];
    candidate integer;
    tried record;
    rest record;
    first_pass boolean := true;
    got integer := 0;
    next_want integer := 1;  -- the want being served
    was_contended boolean := false;
BEGIN
    PERFORM 1 FROM campaigns c
    WHERE c.id IN (SELECT d.campaign FROM deliveries d WHERE d.id = ANY(p_deliveries))
      AND (c.max_per_hour IS NOT NULL OR c.max_per_day IS NOT NULL) AND c.state = 'active'
    ORDER BY c.id
    FOR UPDATE OF c;
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
    WHILE next_want <= want AND cardinality(candidates) > 0 LOOP
        next_pass := '{}';
        FOREACH candidate IN ARRAY candidates LOOP
            EXIT WHEN next_want > want;
            IF first_pass AND p_floor > 0 THEN
                SELECT * INTO rest FROM mtad_account_rest(candidate, at, p_floor, false);
                IF FOUND THEN
                    account := candidate;
                    reservation := NULL;
                    lapsed := NULL;
                    contended := false;
                    granted := NULL;
                    reserved_at := NULL;
                    health := rest.health;
                    rested_until := rest.until;
                    wanted := NULL;
                    limited_until := NULL;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
            END IF;
            LOOP
                SELECT * INTO tried FROM mtad_reserve(candidate, at, coalesce(p_draws[next_want], 0),
                                                      p_wants[next_want], p_deliveries[next_want], p_node);
                EXIT WHEN tried.answer <> 'skipped-campaign-limit';
                account := NULL;
                reservation := NULL;
                lapsed := NULL;
                contended := false;
                granted := NULL;
                reserved_at := NULL;
                health := NULL;
                rested_until := NULL;
                wanted := next_want;
                limited_until := tried.retry_at;
                RETURN NEXT;
                next_want := next_want + 1;
                EXIT WHEN next_want > want;
            END LOOP;
            IF tried.answer = 'reserved' THEN
                got := got + 1;
                wanted := next_want;
                limited_until := NULL;
                next_want := next_want + 1;
                next_pass := next_pass || candidate;
                account := candidate;
                reservation := tried.reservation;
                lapsed := tried.lapsed;
                contended := false;
                granted := tried.granted;
                reserved_at := tried.reserved_at;
                health := NULL;
                rested_until := NULL;
                RETURN NEXT;
            ELSIF tried.answer = 'skipped-locked' THEN
                was_contended := true;
            END IF;
        END LOOP;
        candidates := next_pass;
        first_pass := false;
    END LOOP;
    IF got = 0 THEN
        account := NULL;
        reservation := NULL;
        lapsed := NULL;
        contended := was_contended;
        granted := NULL;
        reserved_at := NULL;
        health := NULL;
        rested_until := NULL;
        wanted := NULL;
        limited_until := NULL;
        RETURN NEXT;
    END IF;
END
$$;
