-- Take a lease on a source address for node $5: on $3, or (NULL) a rotate turn of
-- pool $1 (addresses $2) on any address but $4, of up to $6 sends, a new turn of $7
-- sends drawn when none is open; parked for $8 after a turn. $9 now, $10 the
-- lease's end. One row per address of the pool; `given` marks the one leased.
SELECT address, given, sends, parked_until
FROM mtad_source_take($1, $2::text[], $3, $4::text[], $5, $6, $7, $8::interval, $9, $10)
