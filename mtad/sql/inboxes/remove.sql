-- Stop reading the inbox of account $1; returns whether it was read.
DELETE FROM inboxes WHERE account = $1 RETURNING true
