-- A batch of expired idempotency keys (their messages stay: a key only makes a
-- resubmission recognisable); the BRIN index on expires_at finds them.
WITH gone AS (
    DELETE FROM idempotency_keys
     WHERE ctid = ANY (ARRAY(SELECT ctid FROM idempotency_keys WHERE expires_at < $1 LIMIT $2))
    RETURNING 1
)
SELECT count(*) FROM gone
