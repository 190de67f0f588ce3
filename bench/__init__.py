"""`python -m bench`: mtad against Postfix on loopback, in four parts (`--only` picks some).

- accept: how many messages per second a server accepts *durably* (it answers 250
  only once the message is on disk) from a burst of SMTP sessions on 127.0.0.1, for
  1 KB and 20 KB messages and 1, 10 and 50 concurrent sessions that each send several
  messages over one connection; mtad only accepts, Postfix keeps mail on hold.
- delivery: end to end, 20,000 messages of 1 KB (one recipient, then five) submitted
  to a server that relays them over reused sessions to a discard sink (smtp-sink) on
  loopback: accept rate and end-to-end rate (first submission to last receipt), mtad
  and Postfix to the same sink, with the same outbound concurrency.
- sessions: how many outbound sessions mtad's session pool holds open at once in one
  process (goal 10,000), to sinks on 100 loopback addresses, and the memory they take.
- memory: PostgreSQL's bytes per queued delivery with 1,000,000 waiting, and the
  resident memory of a delivering mtad that holds `max_held` of them.

Every server is driven by the same client, Postfix's `smtp-source`, and each run starts
from empty queues (the drained-then-burst case).

Modules: `client` (smtp-source, timed), `sink` (smtp-sink, counted), `mtad_server`,
`postfix`, `bare` (the servers), `accept`, `delivery`, `outbound`, `spool_memory` (the
parts), `report` (the machine, the tables, RESULTS.md), `__main__` (options, the run).
"""
