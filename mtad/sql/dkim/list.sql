-- Every key (never its private half), by domain, then newest first.
SELECT id, domain, selector, algorithm, state::text AS state, record, created_at, changed_at, published_at,
       published_ttl
FROM dkim_keys ORDER BY domain, created_at DESC, id DESC
