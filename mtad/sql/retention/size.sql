-- The spool database's size on disk, in octets.
SELECT pg_database_size(current_database())
