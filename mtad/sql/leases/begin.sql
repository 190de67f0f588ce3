-- Written before DATA: each delivery in $2 is about to be sent by node $1 as
-- attempt $3[i] to group $4[i]. Returns the ids still leased to the node (a lost
-- lease must not be sent). Found by primary key, no join (see record.sql).
UPDATE deliveries d
SET attempt_id = ($3::uuid[])[array_position($2::bigint[], d.id)],
    route_group = ($4::text[])[array_position($2::bigint[], d.id)],
    updated_at = $5
WHERE d.id = ANY($2::bigint[]) AND d.state::text = 'leased' AND d.lease_owner = $1  -- state as text: see record.sql
RETURNING d.id
