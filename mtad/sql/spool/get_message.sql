SELECT id, tenant, sender, message_id, idempotency_key, size, smtputf8, client_address,
       received_at, pool, substring(body FROM 1 FOR $2) AS head
FROM messages WHERE id = $1
