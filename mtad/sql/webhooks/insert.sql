-- A new endpoint of tenant $1 at URL $2 for event kinds $3 (NULL: every kind) with
-- the sealed secret $4, taking up to $5 events a request; returns it as list does.
INSERT INTO webhook_endpoints AS w (tenant, url, events, secret, batch)
VALUES ($1, $2, $3, $4, $5)
RETURNING w.id, w.tenant, w.url, w.events, w.batch, w.previous_until, w.created_at, 0 AS pending, 0 AS delivered,
          0 AS dead
