-- An endpoint takes up to `batch` events in one request, as a JSON array; 1: one event
-- a request, its object alone.
ALTER TABLE webhook_endpoints ADD COLUMN batch integer NOT NULL DEFAULT 1 CHECK (batch BETWEEN 1 AND 1000);

-- The request a row goes out in: the id of its first row, set when it is first leased
-- and kept, so that a retry sends the same rows under the same webhook-id (msg_<request>).
-- The rows of a request are leased, sent and settled together, and share next_at.
ALTER TABLE webhook_messages ADD COLUMN request bigint;

-- What is due, by endpoint: rows never sent, and requests to send again (or in flight).
DROP INDEX webhook_messages_due;
CREATE INDEX webhook_messages_fresh ON webhook_messages (endpoint, next_at, id)
    WHERE state = 'pending' AND request IS NULL;
CREATE INDEX webhook_messages_again ON webhook_messages (endpoint, next_at, request, id)
    WHERE state = 'pending' AND request IS NOT NULL;
