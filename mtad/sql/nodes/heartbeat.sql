UPDATE nodes SET heartbeat_at = $2 WHERE id = $1
