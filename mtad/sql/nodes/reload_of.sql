-- Node $1's process and its last reload.
SELECT hostname, pid, heartbeat_at, reloaded_at, reload_result FROM nodes WHERE id = $1
