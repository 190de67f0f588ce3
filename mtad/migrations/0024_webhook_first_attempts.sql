-- The webhooks consumer makes each request's first attempt itself, from the events
-- it reads; only what did not go then is written to webhook_messages.
-- webhook_id: the webhook-id the request of a row went out with at that first
-- attempt, kept for its retries (NULL: msg_<request>).
ALTER TABLE webhook_messages ADD COLUMN webhook_id text;

-- Events each endpoint took at their first attempt (they have no row), counted.
CREATE TABLE webhook_delivered (
    endpoint bigint PRIMARY KEY REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    events   bigint NOT NULL
);

-- mtad_webhooks_turn returns each row's webhook_id too; the function file makes it anew.
DROP FUNCTION IF EXISTS mtad_webhooks_turn(text, timestamptz, timestamptz, integer, bigint[], integer[], integer,
                                           bigint[], bigint[], timestamptz[], text[]);
