-- The sealed secrets endpoint $1 signs with at $2: its own, and its previous one
-- while that is still valid.
SELECT secret, CASE WHEN previous_until > $2 THEN previous_secret END AS previous_secret
FROM webhook_endpoints
WHERE id = $1
