-- Every inbox that is read (of account $1 only, when not NULL), with its
-- account's name and created_at, the reader's lease and the read position.
SELECT i.account, a.name, a.created_at AS account_created, i.host, i.port, i.uidvalidity, i.last_uid,
       i.node, i.lease_until, i.read_at, i.error
FROM inboxes i JOIN accounts a ON a.id = i.account
WHERE $1::integer IS NULL OR i.account = $1
ORDER BY a.name
