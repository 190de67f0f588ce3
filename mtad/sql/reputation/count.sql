-- Add outcomes to the minute counts: per row, scope $1[i], key $2[i], minute $3[i]
-- and the counts $4..$8 (each (scope, key, minute) once in the arrays).
INSERT INTO reputation_counts AS c (scope, key, minute, delivered, deferred, bounced, complained, unsubscribed)
SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::int[], $5::int[], $6::int[], $7::int[],
                     $8::int[])
ON CONFLICT (scope, key, minute) DO UPDATE
SET delivered = c.delivered + excluded.delivered, deferred = c.deferred + excluded.deferred,
    bounced = c.bounced + excluded.bounced, complained = c.complained + excluded.complained,
    unsubscribed = c.unsubscribed + excluded.unsubscribed
