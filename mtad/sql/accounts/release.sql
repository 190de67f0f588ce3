-- Give back the slot of reservation $1 (a definite rejection that was not the
-- account's fault, or a send that never began): it counts against no cap any more,
-- nor do its recipients in its day's, nor in its campaign's hour (the slot it took
-- with it), but it stays, settled at $2 (NULL: now, by PostgreSQL's clock), for the
-- gap: the receiver may have seen it. A confirmed reservation went out and is never
-- released. Returns its id, or no row if nothing was released.
WITH gone AS (
    UPDATE account_reservations SET state = 'released', settled_at = coalesce(settled_at, $2, clock_timestamp())
    WHERE id = $1 AND state = 'reserved'
    RETURNING id, account, reserved_at, recipients, campaign
), uncounted AS (
    UPDATE account_days d SET sends = d.sends - gone.recipients
    FROM gone JOIN accounts a ON a.id = gone.account
    WHERE d.account = gone.account AND d.day = (gone.reserved_at AT TIME ZONE a.time_zone)::date
), campaign_uncounted AS (
    UPDATE campaign_sends s SET sends = greatest(0, s.sends - gone.recipients)
    FROM gone
    WHERE s.campaign = gone.campaign AND s.hour = date_trunc('hour', gone.reserved_at, 'UTC')
)
SELECT id FROM gone
