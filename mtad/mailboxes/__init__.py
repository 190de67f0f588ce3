"""Relay through sending mailboxes: the accounts and their limits (reserve before
send, in PostgreSQL), the pool policy that chooses one, OAuth tokens. May import
mtad.outbound, mtad.spool, mtad.db and mtad.base."""
