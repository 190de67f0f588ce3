-- Consumer $1's position, unlocked (its session claims it: claim.sql).
SELECT position_xid::text::bigint AS xid, position_id AS id FROM event_consumers WHERE name = $1
