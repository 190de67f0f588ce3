-- Node $2, reading account $1's inbox, is done with every message up to UID $4 of
-- UIDVALIDITY $3 (and, $5, read it to its end at $6); error $7 is why its last
-- session failed (NULL: it did not). Returns whether the node still reads it.
UPDATE inboxes
SET uidvalidity = $3, last_uid = $4, read_at = CASE WHEN $5::boolean THEN $6 ELSE read_at END, error = $7
WHERE account = $1 AND node = $2
RETURNING true
