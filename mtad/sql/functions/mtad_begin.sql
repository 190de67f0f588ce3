-- The begin of attempts (sql/leases/begin_query.sql says what it checks and writes),
-- a function for its plan: planning that statement costs PostgreSQL about 2 ms, more
-- than running it for a batch of ten, and the delivery pool plans every statement
-- afresh. Here it is planned once per connection, generic, with every table found
-- through an index whatever its size when the plan was made (enable_seqscan off: a
-- plan made on a drained spool must not scan deliveries).
--
-- Running that statement costs about 0.4 ms however few its rows (the executor's
-- start and end of its fifteen parts): when nothing an operator did can concern the
-- batch (mtad_begin_concerned), only the attempt ids are written. What an operator
-- does after that look is seen as if done after the begin, as it would be after the
-- statement's.
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
    IF NOT mtad_begin_concerned(ids, groups, now, tenants, pools, sources, accounts) THEN
        RETURN QUERY
        UPDATE deliveries d
        SET attempt_id = attempt_ids[array_position(ids, d.id)], route_group = groups[array_position(ids, d.id)],
            updated_at = now
        WHERE d.id = ANY(ids) AND d.state::text = 'leased' AND d.lease_owner = node  -- as text: see record_query.sql
        RETURNING d.id, 'begun'::text;
        RETURN;
    END IF;
    RETURN QUERY
\include leases/begin_query
    ;
END
$fn$;
