-- A send through a sending mailbox that may have gone out (its node died after the
-- attempt id was written, or the connection was lost after the data) is held in
-- state 'unknown' rather than sent again: a person's mailbox must not send twice.
-- Mirrors mtad.base.lifecycle.State.UNKNOWN and Reason.MAYBE_SENT.
ALTER TYPE delivery_state ADD VALUE 'unknown';
ALTER TYPE delivery_reason ADD VALUE 'maybe_sent';

-- One row per delivery held unknown: the account it may have gone out through, whose
-- Sent folder is looked in (mtad.spool.unknowns). The delivery's next_attempt_at is
-- when it is sent again if it is not found there ('infinity': no inbox is read, it
-- waits for an operator). No foreign key: every statement that moves a delivery out
-- of 'unknown' deletes its row, and retention deletes deliveries in bulk.
CREATE TABLE unknown_sends (
    delivery   bigint PRIMARY KEY,
    account    integer,               -- accounts.id; NULL: not known (its reservation is gone)
    since      timestamptz NOT NULL,  -- when it was held
    looked_at  timestamptz,           -- the last look in the Sent folder; NULL: none yet
    folder     text                   -- the folder looked in
);
CREATE INDEX unknown_sends_account ON unknown_sends (account);
