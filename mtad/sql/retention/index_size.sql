SELECT pg_relation_size($1::text::regclass)
