-- Submission: the source IP pool a message chose, by its X-Mtad-Pool header or
-- its tenant's default ([tenants."NAME"] pool). NULL: none chosen at submission;
-- delivery then uses the route's pool or [delivery] default_pool. The priority
-- needs no column here: it is copied into each delivery at accept.
ALTER TABLE messages ADD COLUMN pool text;
