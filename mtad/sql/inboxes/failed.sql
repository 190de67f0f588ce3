-- Node $2 could not read account $1's inbox: $3 says why.
UPDATE inboxes SET error = $3 WHERE account = $1 AND node = $2
