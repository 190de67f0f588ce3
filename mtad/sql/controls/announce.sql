-- An operator's change is committed: the controls' next version, and every node
-- told at once (NOTIFY mtad_controls, the version as payload). Returns the version.
WITH bumped AS (
    UPDATE controls SET version = version + 1 RETURNING version
)
SELECT version, pg_notify('mtad_controls', version::text) FROM bumped
