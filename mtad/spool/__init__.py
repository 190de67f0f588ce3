"""The spool in PostgreSQL beyond the bare database: the group-committed writer of
new messages (commit), delivery leases, node registration, the views the tools read,
and retention. Imports mtad.base and mtad.db only."""
