-- Whether a node delivers ([delivery] enabled). Only delivering nodes share the
-- buckets' rates and sessions and the warm-up caps: a node that only accepts
-- must not halve what the others may send.
ALTER TABLE nodes ADD COLUMN delivers boolean NOT NULL DEFAULT true;
