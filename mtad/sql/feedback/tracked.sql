-- The delivery $1 that a tracking token names, while its rows are kept: its message
-- and recipient, when it was delivered (NULL: not delivered), and its last click.
SELECT d.message, d.recipient,
       CASE WHEN d.state::text = 'delivered' THEN d.updated_at END AS delivered_at,
       (SELECT max(e.at) FROM events e
        WHERE e.message = d.message AND e.delivery = d.id AND e.kind = 'clicked') AS last_click
FROM deliveries d
WHERE d.id = $1
