INSERT INTO events (at, kind, message, delivery, tenant, data)
SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::uuid[], $4::bigint[], $5::text[], $6::jsonb[])
