-- The sealed secret ($2, mtad.vault) of the account named $1; returns its id.
UPDATE accounts SET secret = $2, updated_at = now() WHERE name = $1 RETURNING id
