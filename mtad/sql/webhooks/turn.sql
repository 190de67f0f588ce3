-- A turn of the webhook sender of node $1 at $2: settles what it sent, leases what goes
-- next (sql/functions/mtad_webhooks_turn.sql).
SELECT * FROM mtad_webhooks_turn($1, $2, $3, $4, $5::bigint[], $6::integer[], $7, $8::bigint[], $9::bigint[],
                                 $10::timestamptz[], $11::text[])
