-- For each soft bounce given (event $4 at $3 of address $2 for tenant $1, arrays),
-- the soft bounces of its address in the window $5 that ends with it, itself
-- included; the reports of one delivery count once.
SELECT g.event,
       (SELECT count(DISTINCT coalesce(s.delivery, -s.event)) FROM soft_bounces s
        WHERE s.tenant = g.tenant AND s.address = g.address AND s.at > g.at - $5::interval AND s.at <= g.at)
       AS count
FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[]) AS g(tenant, address, at, event)
