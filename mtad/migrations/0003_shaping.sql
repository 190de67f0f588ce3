-- Shaping: the AIMD state of every bucket (provider group, source address), shared
-- by every node. Live tokens stay in memory; what a restart must not forget (that a
-- provider asked for less) is here.
CREATE TABLE buckets (
    route_group text NOT NULL,              -- the provider group: "google", "mx:host1,host2", ...
    source      text NOT NULL,              -- the source address; '' for the system's choice
    rate        double precision NOT NULL,  -- messages per second, all nodes together ('Infinity': unlimited)
    sessions    integer NOT NULL,           -- the session cap, all nodes together
    changed_by  text NOT NULL,              -- the node that wrote rate and sessions
    changed_at  timestamptz,                -- when feedback set them (a later change wins over
                                            -- an earlier one); NULL: the configured start
    updated_at  timestamptz NOT NULL,       -- the last checkpoint that wrote the row
    PRIMARY KEY (route_group, source)
);

-- What each node does with each bucket, written at every checkpoint (for `mtad buckets ls`);
-- a node's rows go when it stops.
CREATE TABLE bucket_usage (
    route_group text NOT NULL,
    source      text NOT NULL,
    node        text NOT NULL,              -- nodes.id
    local_rate  double precision NOT NULL,  -- the node's share of the rate
    allowed     integer NOT NULL,           -- the node's share of the session cap
    tokens      double precision NOT NULL,  -- tokens in the node's share of the burst
    in_flight   integer NOT NULL,           -- sessions (attempts) open
    decreases   bigint NOT NULL,            -- since the node started
    increases   bigint NOT NULL,            -- since the node started
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (route_group, source, node)
);
