"""Delivery: the engine and its pipeline (intake -> dispatch -> attempt -> record),
the ready queues, adaptive shaping per (provider, source address), source address pools.
May import mtad.mailboxes, mtad.signing, mtad.outbound, mtad.spool, mtad.db and
mtad.base; never mtad.submission, config, daemon or cli."""
