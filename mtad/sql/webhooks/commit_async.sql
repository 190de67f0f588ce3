-- The webhook sender's own session does not wait for its commits to be flushed: a turn
-- lost in a crash only sends its requests again (at least once).
SET synchronous_commit = off
