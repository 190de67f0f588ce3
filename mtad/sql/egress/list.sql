-- Every stored warm-up day: a row per warming address and provider it has sent to.
SELECT address, provider, day, day_started, sent, deferred, complaints, updated_at
FROM warmup
ORDER BY address, provider
