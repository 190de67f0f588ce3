"""`python -m bench`: mtad against Postfix (and itself) on loopback, in parts (`--only` picks some).

- accept: how many messages per second a server accepts *durably* (it answers 250
  only once the message is on disk) from a burst of SMTP sessions on 127.0.0.1, for
  1 KB, 20 KB and 100 KB messages and 1, 10 and 50 concurrent sessions that each send
  several messages over one connection; mtad only accepts, Postfix keeps mail on hold.
  At 1 and 10 sessions also the latency from the end of DATA to the reply, p50 and p99.
- inject: HTTP injection (`POST /v1/messages`, raw messages of 1 KB and 20 KB, 10
  and 50 requests at once over keep-alive connections) beside SMTP submission on the
  same node, both durable, in turns: msgs/s, CPU per message, the ratio HTTP/SMTP;
  one node with the default submission processes, one with `processes = 0`.
- delivery: end to end, 20,000 messages of 1 KB (one recipient, then five) submitted
  to a server that relays them over reused sessions to a discard sink (smtp-sink) on
  loopback: accept rate and end-to-end rate (first submission to last receipt), mtad
  and Postfix to the same sink, with the same outbound concurrency.
- sessions: how many outbound sessions mtad's session pool holds open at once in one
  process (goal 10,000), to sinks on 100 loopback addresses, and the memory they take.
- memory: PostgreSQL's bytes per queued delivery with 1,000,000 waiting, and the
  resident memory of a delivering mtad that holds `max_held` of them.
- shaping: what traffic shaping costs: bucket decisions (`Shaper.take` + `done`) per
  second on one bucket and on 100; end-to-end rate (the delivery part's cell, one
  recipient) of a node whose bucket is unlimited against one whose finite bucket never
  binds (goal: under 5 % overhead); and 1,000,000 deferred deliveries due at once on a
  node whose bucket is pinned at 500/s: the release rate at the sink and mtad's
  resident memory, second by second (`--quick`: 100,000 of them, for 20 s).
- accounts: reserve before send: `accounts.reserve` calls per second with 1, 10 and
  100 concurrent callers on 5 and 500 accounts whose limits never bind, and
  `choosing.choose` per second with 10 callers.
- relay: the end-to-end rate of mail relayed through 5 sending accounts at a
  smarthost sink (STARTTLS, AUTH) against the same mail sent without the mailbox
  layer to a like sink (goal: under 10 % overhead).
- dkim: DKIM signing time per 2 KB and 50 KB message, RSA-2048 and Ed25519, mtad.signing.dkim
  beside plain dkimpy (goal: under 0.5 ms and 1.5 ms with RSA-2048).
- signed: the delivery part with every message DKIM-signed (RSA-2048, one key for both),
  2 KB and 100 KB bodies, 1 and 5 recipients: mtad against Postfix with Debian's
  opendkim as its milter (goal: 3x the rate, at most a third of the CPU per message).
- feedback: bounce reports (RFC 3464 DSNs to VERP addresses, some soft, some
  non-standard ones matched by Message-ID) sent to mtad's inbound listener and applied
  per second, with mtad's CPU per report (goal: 1,000 a second on one core); accept
  with 1,000,000 suppressed addresses against an empty list (goal: under 5 % slower);
  and `mtad suppress import` / `export` of those 1,000,000 (goal: under a minute each).
- cli: `mtad --help`, `check-config`, `reload`, `queue ls` and `events tail`, each timed as
  a whole process against a running node: wall time and CPU (goal: each under 0.3 s).
- page: the status page in headless Chromium against a node with 1,000,000 deliveries
  not yet final and 100 campaigns: first paint, first contentful paint, every section
  filled, the bytes of its files, and each API read it makes (goal: first paint under
  200 ms).
- nodes: the cost of scaling out: 1, 2 and 4 delivering nodes on one PostgreSQL, the
  delivery part's cell (1 and 5 recipients) submitted to every node at once, its 48
  sessions split among the nodes or 48 to each: the end-to-end rate, PostgreSQL's and
  each node's CPU per message, its transactions and WAL fsyncs per message, calls per
  statement, and PostgreSQL's CPU a second with no mail; from it the rate one 8-core
  PostgreSQL would carry (goal: PostgreSQL's CPU per message at 4 nodes within 20 % of
  one node's).

In the parts against Postfix every server is driven by the same client, Postfix's
`smtp-source`, and each run starts from empty queues (the drained-then-burst case).
`mtad blast` does not replace it for rates: it pipelines where smtp-source waits for
each reply (as most submitting apps do, and as the results so far were measured),
and against smtp-sink it took 0.07 ms of CPU per message to smtp-source's 0.035
(10,000 x 1 KB over 10 sessions), on a machine of two cores whose CPU per message
the parts compare. It is the client for the accept part's latency, in bursts of
their own after the rate bursts: it times each message from handing the final dot
to the socket to the reply (`data_latency_ms`), the server's accept alone, which
pipelining before it does not change, and smtp-source reports no latency; timing
in a client of the part's own would have been a second SMTP client to keep. Nor
`inbound_client`: the feedback part sends prepared reports, and blast makes its
own messages. Use blast by hand for latency at a chosen rate, which smtp-source
cannot pace.

Modules: `client` (smtp-source, timed), `sink` (smtp-sink, counted), `mtad_server`,
`postfix`, `opendkim`, `bare` (the servers), `accept`, `inject`, `delivery`, `outbound`,
`spool_memory`, `shaping`, `accounts`, `relay`, `dkim`, `signed`, `retention`, `feedback`,
`cli`, `page`, `nodes` (the parts; `cluster` runs the nodes part's nodes, `inbound_client`
sends the feedback part's reports, `inject_client` the inject part's requests), `report`
(the machine, the tables, RESULTS.md), `__main__` (options, the run), `cpu` (CPU per party).
"""
