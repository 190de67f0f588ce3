-- What logging in as account $1 needs: its sealed secret (the password, or the
-- refresh token for xoauth2) and its OAuth client (sealed client secret).
SELECT secret, oauth_token_url, oauth_client_id, oauth_client_secret, oauth_scope FROM accounts WHERE id = $1
