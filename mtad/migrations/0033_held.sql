-- An operator's hold (`mtad queue hold`, Postfix's hold queue): a held delivery is
-- never leased (deliveries_due covers queued and deferred only) until released.
-- Mirrors mtad.base.lifecycle.State.HELD.
ALTER TYPE delivery_state ADD VALUE 'held';
