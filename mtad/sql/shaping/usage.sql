-- Node $1's use of its buckets at $10 (for `mtad buckets ls`).
INSERT INTO bucket_usage (node, route_group, source, local_rate, allowed, tokens, in_flight,
                          decreases, increases, updated_at)
SELECT $1, g, s, r, a, t, f, d, i, $10
FROM unnest($2::text[], $3::text[], $4::float8[], $5::integer[], $6::float8[], $7::integer[],
            $8::bigint[], $9::bigint[]) AS u(g, s, r, a, t, f, d, i)
ON CONFLICT (route_group, source, node) DO UPDATE
SET local_rate = excluded.local_rate, allowed = excluded.allowed, tokens = excluded.tokens,
    in_flight = excluded.in_flight, decreases = excluded.decreases, increases = excluded.increases,
    updated_at = excluded.updated_at
