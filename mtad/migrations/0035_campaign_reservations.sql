-- A relayed send's campaign slot is reserved with its mailbox's, in one reservation
-- (mtad_reserve): the campaign whose sends (campaign_sends) it counted, given back
-- with it when it is released.
ALTER TABLE account_reservations ADD COLUMN campaign bigint;

-- mtad_choose answers which want each row is for, and the wants its campaign's
-- limits refused; the function file makes it anew.
DROP FUNCTION IF EXISTS mtad_choose(text, timestamptz, integer[], double precision[], bigint[], text, integer);
