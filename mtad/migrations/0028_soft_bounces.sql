-- Soft bounces (a full mailbox, an expiry...), in the SMTP session or after it,
-- per tenant and address: [suppression] soft_after of them within soft_window
-- suppress the address (reason soft_bounce). Retention deletes those older than
-- the window.
CREATE TABLE soft_bounces (
    event    bigint PRIMARY KEY,      -- the bounced event (its consumer may see it again)
    tenant   text NOT NULL,
    address  text NOT NULL,           -- in lower case
    delivery bigint,                  -- two reports of one delivery count once
    at       timestamptz NOT NULL
);
CREATE INDEX soft_bounces_address ON soft_bounces (tenant, address, at);
CREATE INDEX soft_bounces_at ON soft_bounces (at);

ALTER TABLE suppressions DROP CONSTRAINT suppressions_reason_check;
ALTER TABLE suppressions ADD CONSTRAINT suppressions_reason_check
    CHECK (reason IN ('hard_bounce', 'soft_bounce', 'complaint', 'unsubscribe', 'manual'));
