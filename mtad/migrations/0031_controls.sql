-- The operator's controls (suspensions, reroutes, paused tenants, disabled
-- accounts) are versioned: a command bumps the version once its change is
-- committed and NOTIFYs mtad_controls; each node writes on its row the version
-- it has read and applied, and the command waits for every live node to have.
CREATE TABLE controls (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),  -- a single row
    version bigint NOT NULL
);
INSERT INTO controls (version) VALUES (0);

ALTER TABLE nodes ADD COLUMN controls_applied bigint;  -- NULL: none yet
