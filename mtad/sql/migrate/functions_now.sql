-- The digest of every function in the public schema now, and the one recorded.
SELECT (SELECT md5(coalesce(string_agg(pg_get_functiondef(p.oid), '' ORDER BY p.oid::regprocedure::text), ''))
          FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f') AS installed,
       (SELECT installed FROM schema_functions) AS recorded_installed,
       (SELECT files FROM schema_functions) AS recorded_files
