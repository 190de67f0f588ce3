SELECT id, tenant, sender, message_id, body, smtputf8, received_at FROM messages WHERE id = $1
