-- Consumer $1 has done every event up to position ($2 xid, $3 id), at $4.
UPDATE event_consumers SET position_xid = $2::text::xid8, position_id = $3, updated_at = $4 WHERE name = $1
