-- One batch of accepted messages, committed by this one statement (see spool_accept
-- in migrations/0001_spool.sql). Returns the owning message of each, in order.
SELECT spool_accept($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
