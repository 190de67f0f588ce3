-- The envelopes of the messages $1, for sending (one query per leased batch), with
-- the source IP pool and the account pool chosen at submission (NULL: none), the
-- name of its campaign (NULL: none), the
-- DKIM signature fields they were last sent with, and their bodies as long as
-- the bodies so far add up to at most $2 bytes (the room left in the node's body
-- cache); a body left out (NULL) is read again when its message is sent.
SELECT id, tenant, sender, message_id, size, smtputf8, received_at, pool, account_pool,
       (SELECT c.name FROM campaigns c WHERE c.id = messages.campaign) AS campaign,
       dkim_fields, dkim_keys, dkim_header,
       CASE WHEN sum(size) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) <= $2 THEN body END AS body
FROM messages
WHERE id = ANY($1::uuid[])
