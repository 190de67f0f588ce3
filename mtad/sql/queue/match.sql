-- The filters every statement of queue/ shares, over deliveries d joined to their
-- messages m (NULL: any): $1 states, $2 tenant, $3 provider group ('-': never
-- attempted), $4 domain, $5 created at or before, $6 message, $7 delivery.
    ($1::text[] IS NULL OR d.state::text = ANY($1::text[]))
AND ($2::text IS NULL OR m.tenant = $2::text)
AND ($3::text IS NULL OR coalesce(d.route_group, '-') = $3::text)
AND ($4::text IS NULL OR d.domain = $4::text)
AND ($5::timestamptz IS NULL OR d.created_at <= $5::timestamptz)
AND ($6::uuid IS NULL OR d.message = $6::uuid)
AND ($7::bigint IS NULL OR d.id = $7::bigint)
