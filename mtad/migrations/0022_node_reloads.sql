-- What a node's last reload of its configuration came to (SIGHUP, `mtad reload`):
-- when, and {"ok": bool, "problems": [...], "restart": [...]} (the keys that
-- change only with a restart).
ALTER TABLE nodes ADD COLUMN reloaded_at timestamptz;
ALTER TABLE nodes ADD COLUMN reload_result jsonb;
