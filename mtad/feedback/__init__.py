"""Feedback: what comes back after delivery (bounces, complaints, replies,
unsubscribes) recorded as events, the event consumers that act on them, and the
suppression lists. May import mtad.outbound, mtad.spool, mtad.db and mtad.base."""
