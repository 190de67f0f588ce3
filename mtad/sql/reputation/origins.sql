-- Where each delivery of $2 (of the messages $1) left from: the provider group and
-- source address of its delivered event, the latest when there are several.
SELECT DISTINCT ON (e.delivery) e.delivery, e.data->>'group' AS route_group, e.data->>'source' AS source
FROM events e
WHERE e.message = ANY($1::uuid[]) AND e.delivery = ANY($2::bigint[]) AND e.kind = 'delivered'
ORDER BY e.delivery, e.id DESC
