-- The delivery a bounce's VERP address names ($1): its recipient and message; no
-- row when there is no such delivery (never was, or deleted since).
SELECT d.recipient, d.message
FROM deliveries d
WHERE d.id = $1
