-- The sends held unknown $1 were looked for at $2 in folder $3 and not found.
UPDATE unknown_sends SET looked_at = $2, folder = $3 WHERE delivery = ANY($1::bigint[])
