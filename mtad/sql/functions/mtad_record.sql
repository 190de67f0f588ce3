-- The record of outcomes (sql/leases/record_query.sql says what it writes), a
-- function for its plan, as mtad_begin: planned once per connection, generic, every
-- table found through an index. Returns the ids recorded.
CREATE OR REPLACE FUNCTION mtad_record(
    node text, now timestamptz, ids bigint[], states delivery_state[], reasons delivery_reason[], codes smallint[],
    enhanced text[], texts text[], next_attempts timestamptz[], tenants text[], data jsonb[], groups text[],
    internal boolean[], suppress bigint[], suppress_for interval
) RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
AS $fn$
#variable_conflict use_column
DECLARE
    recorded bigint[];
BEGIN
\include leases/record_query
    INTO recorded;
    RETURN recorded;
END
$fn$;
