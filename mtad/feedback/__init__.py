"""Feedback: what comes back after delivery (bounces, complaints, replies,
unsubscribes), suppression and webhooks. Empty for now; the feedback features land
here. May import mtad.outbound, mtad.spool, mtad.db and mtad.base."""
