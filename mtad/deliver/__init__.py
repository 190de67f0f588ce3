"""Delivery: the engine that leases due deliveries and sends them, the ready
queues, adaptive shaping per (provider, source address), source address pools.
May import mtad.mailboxes, mtad.signing, mtad.outbound, mtad.spool, mtad.db and
mtad.base; never mtad.submission, config, daemon or cli."""
