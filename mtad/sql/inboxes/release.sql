-- Node $1 stops reading the inboxes of accounts $2.
UPDATE inboxes SET node = NULL, lease_until = NULL WHERE node = $1 AND account = ANY ($2::integer[])
