-- An event for what came back after delivery ($2: bounced, complained,
-- auth_failure, unsubscribed, replied, auto_replied) at $1, about delivery $4 of
-- message $3 (each NULL when not known: the message is then the delivery's, the
-- tenant $5 when given, else the message's), with data $6. A bounce that reports a
-- failure ($7: failed or expired, hard or soft; never a delay notice) of a delivery
-- recorded as delivered moves it to bounced (reason async_bounce) with the
-- bounce's status $8 and diagnostic $9. Returns the event's id.
WITH moved AS (
    UPDATE deliveries d
    SET state = 'bounced', reason = 'async_bounce', last_enhanced = coalesce($8, d.last_enhanced),
        last_text = coalesce($9, d.last_text), updated_at = $1
    WHERE d.id = $4::bigint AND $2 = 'bounced' AND $7::boolean AND d.state::text = 'delivered'
    RETURNING d.id
)
INSERT INTO events (at, kind, message, delivery, tenant, data)
SELECT $1, $2, coalesce($3::uuid, d.message), d.id, coalesce($5::text, m.tenant),
       CASE WHEN $2 = 'bounced' THEN $6::jsonb || jsonb_build_object('moved', EXISTS (SELECT 1 FROM moved))
            ELSE $6::jsonb END
FROM (SELECT 1) AS one
LEFT JOIN deliveries d ON d.id = $4::bigint
LEFT JOIN messages m ON m.id = coalesce($3::uuid, d.message)
RETURNING id
