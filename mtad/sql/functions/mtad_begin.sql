-- The begin of attempts (sql/leases/begin_query.sql says what it checks and writes),
-- a function for its plan: planning that statement costs PostgreSQL about 2 ms, more
-- than running it for a batch of ten, and the delivery pool plans every statement
-- afresh. Here it is planned once per connection, generic, with every table found
-- through an index whatever its size when the plan was made (enable_seqscan off: a
-- plan made on a drained spool must not scan deliveries).
CREATE OR REPLACE FUNCTION mtad_begin(
    node text, ids bigint[], attempt_ids uuid[], groups text[], now timestamptz, tenants text[], pools text[],
    sources text[], accounts bigint[]
) RETURNS TABLE (id bigint, became text)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
#variable_conflict use_column
BEGIN
    RETURN QUERY
\include leases/begin_query
    ;
END
$fn$;
