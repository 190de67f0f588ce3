-- Reserve one send through account $1 at $2, $3 being the caller's uniform draw in
-- [0, 1] for the gap's jitter. Run alone, as its own transaction: the account's
-- advisory lock lasts only as long as this statement. See mtad_reserve (migrations
-- 0006 and 0007) for the answers; lapsed: the timed state this reservation ended.
SELECT answer, reservation, retry_at, lapsed FROM mtad_reserve($1, $2, $3)
