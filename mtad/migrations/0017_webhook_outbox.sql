-- The webhook requests to make: one row per (endpoint, event), written by the
-- `webhooks` event consumer in the transaction that moves its position (so each is
-- written once), sent by any node's sender at least once. Rows of one message go
-- out in order: a row is due only when no older row of its (endpoint, message) is
-- still pending.
CREATE TABLE webhook_messages (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- the request's webhook-id: msg_<id>
    endpoint     bigint NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event        bigint NOT NULL,  -- events.id
    message      uuid,             -- the mail it is about (NULL: none; no order is kept then)
    payload      text NOT NULL,    -- the JSON body, as signed
    state        text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'dead')),
    attempts     integer NOT NULL DEFAULT 0,
    next_at      timestamptz NOT NULL,  -- when it is due (again)
    leased_by    text,                  -- the node sending it while leased_until is ahead
    leased_until timestamptz,
    last_error   text,                  -- why the last attempt failed; a dead one's reason
    created_at   timestamptz NOT NULL,
    done_at      timestamptz            -- delivered or dead
);
CREATE INDEX webhook_messages_due ON webhook_messages (next_at) WHERE state = 'pending';
CREATE INDEX webhook_messages_order ON webhook_messages (endpoint, message, id) WHERE state = 'pending';
