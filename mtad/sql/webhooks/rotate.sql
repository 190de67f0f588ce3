-- Endpoint $1 signs with the sealed secret $2 from now on; its current secret goes on
-- signing until $3. Returns whether there is such an endpoint.
UPDATE webhook_endpoints
SET previous_secret = secret, previous_until = $3, secret = $2
WHERE id = $1
RETURNING true
