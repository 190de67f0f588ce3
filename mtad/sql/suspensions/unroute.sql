-- Provider group $1's mail leaves from its own pool again. Returns the reroute ended.
DELETE FROM reroutes WHERE provider = $1 RETURNING provider, pool, reason, created_at, until
