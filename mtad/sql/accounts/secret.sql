-- The sealed secret of account $1 (opened only by the node that sends, with its key).
SELECT secret FROM accounts WHERE id = $1
