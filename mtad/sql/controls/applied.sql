-- Node $1 has applied the controls of version $2 (in each of its processes).
UPDATE nodes SET controls_applied = $2 WHERE id = $1 AND coalesce(controls_applied, -1) < $2
