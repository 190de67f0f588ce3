-- The stored warm-up days of the addresses $1 (every provider each has sent to).
SELECT address, provider, day, day_started, sent, deferred, complaints
FROM warmup
WHERE address = ANY($1::text[])
