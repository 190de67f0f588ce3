-- Read the inbox of account $1 at IMAP server $2, port $3 (a new server starts
-- its position afresh); returns whether the account exists.
INSERT INTO inboxes (account, host, port)
SELECT a.id, $2, $3 FROM accounts a WHERE a.id = $1
ON CONFLICT (account) DO UPDATE
SET host = excluded.host, port = excluded.port,
    uidvalidity = CASE WHEN (inboxes.host, inboxes.port) = (excluded.host, excluded.port)
                       THEN inboxes.uidvalidity END,
    last_uid = CASE WHEN (inboxes.host, inboxes.port) = (excluded.host, excluded.port)
                    THEN inboxes.last_uid ELSE 0 END
RETURNING true
