"""DKIM: keys (generated, sealed in PostgreSQL), signing at transmission, and the
rotation that activates, retires and revokes keys as DNS publishes them. May import
mtad.outbound, mtad.spool, mtad.db and mtad.base."""
