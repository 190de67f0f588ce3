-- Source addresses shared by every node: a node sends through an address only
-- while it holds a lease on it, and a rotate pool's turns are drawn and counted
-- here (mtad_source_take, mtad_source_release in mtad/sql/functions/).
CREATE TABLE source_addresses (
    address text PRIMARY KEY,
    pool text NOT NULL,
    turn integer CHECK (turn > 0),  -- rotate: the sends of its open turn (NULL: no turn open)
    turn_sends integer NOT NULL DEFAULT 0,  -- sends of the turn given out, to every node
    parked_until timestamptz,  -- rotate: resting after its last turn until then
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE source_leases (
    address text NOT NULL REFERENCES source_addresses ON DELETE CASCADE,
    node text NOT NULL,
    sends integer,  -- rotate: the sends of the turn given to this node; NULL: a lease without a count
    taken_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (address, node)
);
CREATE INDEX source_leases_node ON source_leases (node);
