"""The shared base: values, errors, the delivery state machine and event kinds,
envelopes and headers, batching, replies, secrets, logging, metrics and the HTTP
endpoint. It imports nothing of mtad outside itself (the database is `mtad.db`)."""
