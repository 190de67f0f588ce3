-- Give back node $3's leases on the addresses $2 of pool $1 (rest: $4, now: $5);
-- returns the addresses whose turn thereby ended and that now rest.
SELECT address FROM mtad_source_release($1, $2::text[], $3, $4::interval, $5)
