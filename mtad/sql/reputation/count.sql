-- Add outcomes to the minute counts: per row, scope $1[i], tenant $2[i], key $3[i],
-- minute $4[i] and the counts $5..$10 (each (scope, tenant, key, minute) once in the
-- arrays).
INSERT INTO reputation_counts AS c (scope, tenant, key, minute, delivered, deferred, bounced, complained,
                                    unsubscribed, refused)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int[], $6::int[], $7::int[],
                     $8::int[], $9::int[], $10::int[])
ON CONFLICT (scope, tenant, key, minute) DO UPDATE
SET delivered = c.delivered + excluded.delivered, deferred = c.deferred + excluded.deferred,
    bounced = c.bounced + excluded.bounced, complained = c.complained + excluded.complained,
    unsubscribed = c.unsubscribed + excluded.unsubscribed, refused = c.refused + excluded.refused
