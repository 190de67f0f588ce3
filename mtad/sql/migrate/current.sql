-- What a tool asks before it uses the spool: whether no migration run holds the lock
-- (taken for this statement only), the latest migration applied, and the functions'
-- digests (now, and as recorded when their files were last applied).
SELECT pg_try_advisory_xact_lock($1) AS free,
       (SELECT max(version) FROM schema_migrations) AS version,
       (SELECT md5(coalesce(string_agg(pg_get_functiondef(p.oid), '' ORDER BY p.oid::regprocedure::text), ''))
          FROM pg_proc p
         WHERE p.pronamespace = 'public'::regnamespace AND p.prokind = 'f') AS installed,
       (SELECT installed FROM schema_functions) AS recorded_installed,
       (SELECT files FROM schema_functions) AS recorded_files
