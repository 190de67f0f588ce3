-- Forget idempotency keys that expired; the messages they point to stay.
DELETE FROM idempotency_keys WHERE expires_at < $1
