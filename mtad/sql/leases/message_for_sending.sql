-- The envelopes and bodies of the messages $1, for sending (one query per leased batch),
-- with the source IP pool chosen at submission (NULL: none).
SELECT id, tenant, sender, message_id, body, smtputf8, received_at, pool FROM messages WHERE id = ANY($1::uuid[])
