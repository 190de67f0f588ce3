-- Soft bounces, one per element of the arrays: event $4 at $3 about delivery $5,
-- of address $2 for tenant $1. An event seen again is counted once.
INSERT INTO soft_bounces (tenant, address, at, event, delivery)
SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bigint[], $5::bigint[])
ON CONFLICT (event) DO NOTHING
