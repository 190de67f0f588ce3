-- Where a node's process listens, as it said once its sockets were bound
-- ({"submission": ["127.0.0.1:2525"], "http": [...]}; NULL: not yet): a second
-- process refused the node's id names them.
ALTER TABLE nodes ADD COLUMN listening jsonb;
