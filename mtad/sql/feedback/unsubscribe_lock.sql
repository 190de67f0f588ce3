-- Unsubscribes of one delivery ($1: its key, see signals.record) are recorded one
-- at a time, until the transaction ends.
SELECT pg_advisory_xact_lock(hashtext('mtad_unsubscribed'), hashtext($1))
