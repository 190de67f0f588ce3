INSERT INTO messages (id, tenant, sender, message_id, idempotency_key, size, body,
                      smtputf8, client_address, received_at)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[],
                     $6::integer[], $7::bytea[], $8::boolean[], $9::text[], $10::timestamptz[])
