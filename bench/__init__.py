"""`python -m bench`: durable accept throughput of mtad against Postfix, on loopback.

What is measured: how many messages per second a server accepts *durably* (it answers
250 only once the message is on disk) from a burst of SMTP sessions on 127.0.0.1, for
1 KB and 20 KB messages and 1, 10 and 50 concurrent sessions that each send several
messages over one connection. Both servers are driven by the same client, Postfix's
`smtp-source`, and each run starts from an empty spool (the drained-then-burst case).

- mtad runs as `mtad run` with its embedded PostgreSQL (fsync and synchronous_commit
  on); a message is durable at COMMIT of its group-commit batch.
- Postfix is a private instance (its own config, queue and data directories, loopback
  only) that puts every accepted message on hold, so it too only accepts: cleanup
  fsyncs the queue file before smtpd answers 250, and nothing is ever delivered.

Modules: `client` (smtp-source, timed), `mtad_server`, `postfix` (the two servers),
`report` (the machine, the table, RESULTS.md), `__main__` (the run plan).
"""
