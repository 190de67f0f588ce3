-- The envelopes and bodies of the messages $1, for sending (one query per leased batch).
SELECT id, tenant, sender, message_id, body, smtputf8, received_at FROM messages WHERE id = ANY($1::uuid[])
