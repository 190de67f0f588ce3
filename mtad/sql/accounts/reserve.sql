-- Reserve a send of $4 recipients through account $1 at $2 (NULL: PostgreSQL's
-- clock), $3 being the caller's uniform draw in [0, 1] for the gap's jitter, for
-- delivery $5 of node $6 (NULL: outside delivery). Run alone, as its own
-- transaction: the account's advisory lock lasts only as long as this statement.
-- See mtad_reserve (migrations 0006, 0007 and 0011) for the answers; lapsed: the
-- timed state this reservation ended; granted: the recipients it may carry.
SELECT answer, reservation, retry_at, lapsed, granted, reserved_at FROM mtad_reserve($1, $2, $3, $4, $5, $6)
