-- The message with Message-ID $1 (as its header gave it, angle brackets included)
-- and its delivery to recipient $2 (NULL: none looked for) with its provider
-- group, newest first: what a bounce or a reply that quotes the original is about.
-- `verp`: an attempt of that delivery left with a VERP envelope sender (its
-- events say so), so that only a report to that address is about it.
SELECT m.id AS message, m.tenant, d.id AS delivery, d.route_group,
       d.id IS NOT NULL AND EXISTS (
           SELECT 1 FROM events e WHERE e.message = m.id AND e.delivery = d.id AND e.data ? 'verp'
       ) AS verp
FROM messages m
LEFT JOIN deliveries d ON d.message = m.id AND lower(d.recipient) = lower($2)
WHERE m.message_id = $1
ORDER BY m.received_at DESC
LIMIT 1
