-- After the function files ran: their digest and that of the functions they left.
WITH cleared AS (DELETE FROM schema_functions)
INSERT INTO schema_functions (files, installed)
SELECT $1, md5(coalesce(string_agg(pg_get_functiondef(p.oid), '' ORDER BY p.oid::regprocedure::text), ''))
  FROM pg_proc p
 WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f'
