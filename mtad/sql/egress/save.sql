-- Write the warm-up days of one node, one row per (address, provider) at the same
-- position of the arrays $1..$7; $8 is the time of the save. Returns the rows it
-- changed.
--
-- Idempotent, and never backwards: a row whose stored day began later is left as
-- it is (a node with a stale view cannot undo another's new day), and within the
-- same day the larger of the counts wins (so that two nodes sharing an address
-- do not write each other's counts down). A save that changes nothing writes
-- nothing, updated_at included.
INSERT INTO warmup AS w (address, provider, day, day_started, sent, deferred, complaints, updated_at)
SELECT address, provider, day, day_started, sent, deferred, complaints, $8
FROM unnest($1::text[], $2::text[], $3::integer[], $4::timestamptz[], $5::integer[], $6::integer[], $7::integer[])
    AS r (address, provider, day, day_started, sent, deferred, complaints)
ON CONFLICT (address, provider) DO UPDATE
SET day = CASE WHEN w.day_started = excluded.day_started THEN greatest(w.day, excluded.day) ELSE excluded.day END,
    day_started = excluded.day_started,
    sent = CASE WHEN w.day_started = excluded.day_started THEN greatest(w.sent, excluded.sent) ELSE excluded.sent END,
    deferred = CASE WHEN w.day_started = excluded.day_started
               THEN greatest(w.deferred, excluded.deferred) ELSE excluded.deferred END,
    complaints = CASE WHEN w.day_started = excluded.day_started
                 THEN greatest(w.complaints, excluded.complaints) ELSE excluded.complaints END,
    updated_at = excluded.updated_at
WHERE w.day_started < excluded.day_started
   OR (w.day_started = excluded.day_started
       AND (excluded.day > w.day OR excluded.sent > w.sent OR excluded.deferred > w.deferred
            OR excluded.complaints > w.complaints))
RETURNING address
