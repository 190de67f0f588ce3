-- The DKIM signature fields $2 (made by keys $3 over a header block of digest $4)
-- of messages $1, each an array by position (the keys as text: '{1,2}'). Committed
-- without waiting for the WAL flush: a lost one only means signing again.
WITH quick AS (SELECT set_config('synchronous_commit', 'off', true))
UPDATE messages m SET dkim_fields = s.fields, dkim_keys = s.keys::integer[], dkim_header = s.header
FROM unnest($1::uuid[], $2::bytea[], $3::text[], $4::bytea[]) AS s (id, fields, keys, header), quick
WHERE m.id = s.id
