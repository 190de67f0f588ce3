-- The spool's indexes that are mostly empty pages, per the statistics of the last
-- (auto)vacuum: at least $1 octets, and fewer than $2 entries a page where a
-- rebuilt one holds hundreds. Deleting a backlog leaves such indexes behind:
-- PostgreSQL reuses their pages but never gives them back until a rebuild.
SELECT i.indexrelid::regclass::text AS name, pg_relation_size(i.indexrelid) AS octets
  FROM pg_index i
  JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = ANY (ARRAY['messages', 'deliveries', 'events', 'idempotency_keys']::regclass[])
   AND pg_relation_size(i.indexrelid) >= $1
   AND c.reltuples >= 0
   AND c.reltuples < $2 * (pg_relation_size(i.indexrelid) / current_setting('block_size')::int)
 ORDER BY 2 DESC
