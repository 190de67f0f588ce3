-- Node $1 reloaded its configuration at $2, with result $3.
UPDATE nodes SET reloaded_at = $2, reload_result = $3::jsonb WHERE id = $1
