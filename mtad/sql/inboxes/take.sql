-- Node $2 takes the reading of account $1's inbox until $4, when no other node's
-- lease on it runs past $3 (now); returns the inbox as list does, when taken.
UPDATE inboxes i
SET node = $2, lease_until = $4
FROM accounts a
WHERE i.account = $1 AND a.id = i.account
  AND (i.node IS NULL OR i.node = $2 OR i.lease_until IS NULL OR i.lease_until <= $3)
RETURNING i.account, a.name, a.created_at AS account_created, i.host, i.port, i.uidvalidity, i.last_uid,
          i.node, i.lease_until, i.read_at, i.error
