-- mtad_webhooks_turn settles by request: (rows, then each request's id, due and error)
-- instead of a due and an error per row, so that joining what it settles is linear in
-- the rows. The function file makes the new one; the old arguments go here.
DROP FUNCTION IF EXISTS mtad_webhooks_turn(text, timestamptz, timestamptz, integer, bigint[], integer[], integer,
                                           bigint[], timestamptz[], text[]);
