-- The OAuth client of the account named $1: token endpoint $2, client id $3, sealed
-- client secret $4 (NULL: none), scope $5 (NULL: none). Returns its id.
UPDATE accounts SET oauth_token_url = $2, oauth_client_id = $3, oauth_client_secret = $4, oauth_scope = $5,
                    updated_at = now()
WHERE name = $1 RETURNING id
