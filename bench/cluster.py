"""N delivering mtad nodes on one PostgreSQL, as the nodes part drives them.

The first node owns the embedded PostgreSQL (it starts and stops it, prepared to load
pg_stat_statements and to take every node's pools); the others are `mtad run`
processes of their own, each with its own `[node] id` and ports and the first one's
DSN, as the multi-node tests run them. `submit()` hands each node its share of a
burst through its own smtp-source; `sample()` reads the CPU of PostgreSQL, of each
node, of the sink and of the client from /proc; `counters()` PostgreSQL's
transactions and WAL fsyncs; `statements()` pg_stat_statements' calls and execution
time by statement, each named by the .sql file it came from.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import re
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench import client, cpu, delivery, mtad_server, sink
from bench.mtad_server import Delivery, MtadError, MtadServer
from mtad.db import access, embedded

MAX_CONNECTIONS = 400  # a node opens two pools of [database] pool_size, its submission process one more
SQL = Path(__file__).parents[1] / "mtad" / "sql"
STATEMENTS = """\
SELECT regexp_replace(query, '\\s+', ' ', 'g'), calls, total_exec_time FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"""
COUNTERS = (
    "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()",
    "SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal'",
)
FLUSHED = 1.5  # seconds until an idle backend has flushed its statistics (at most one a second)


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
        """Start nodes until `count` run."""
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

    def sample(self, the_sink: sink.Sink) -> Sample:
        pg = cpu.snapshot((self.owner.pids()[1],))["PostgreSQL"]
        nodes = tuple(cpu.snapshot(node.pids()[:1])["mtad"] for node in self.nodes)
        pid = the_sink.pid()
        rest = cpu.snapshot((pid,) if pid else ())
        return Sample(time.monotonic(), pg, nodes, rest["sink"], rest["client"])

    def listeners(self) -> int:
        """Connections that LISTEN: PostgreSQL signals every one of them at every NOTIFY, whatever its channel."""
        return int(self.owner.query("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'")[0])

    def counters(self) -> tuple[int, int]:
        """Transactions in the spool's database and WAL fsyncs so far, as PostgreSQL has counted
        them: a backend flushes its counts once idle, at most once a second."""
        transactions, fsyncs = self.owner.query(*COUNTERS)
        return int(transactions), int(fsyncs)

    def statements(self) -> dict[str, tuple[int, float]]:
        """Calls and execution ms by statement since the reset (the bench's own left out)."""
        found: dict[str, tuple[int, float]] = {}
        for query, calls, ms in csv.reader(self.owner.query(f"COPY ({STATEMENTS}) TO STDOUT WITH (FORMAT csv)")):
            name = _name(query)
            before = found.get(name, (0, 0.0))
            found[name] = (before[0] + int(calls), before[1] + float(ms))
        found.pop("(bench)", None)
        return found

    def submit(self, the_sink: sink.Sink, messages: int, recipients: int, sessions: int) -> tuple[float, float]:
        """One smtp-source per node at once, each with its share of the messages and `sessions`;
        returns the seconds to the sink's receipt of the last message and to the last accept."""
        base = the_sink.count()
        timeout = delivery.timeout_for(messages, recipients)
        share = messages // len(self.nodes)
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            sent = [
                pool.submit(client.send, node.host, node.port, sessions=sessions, messages=share,
                            size=delivery.SIZE, timeout=timeout, recipients=recipients)
                for node in self.nodes
            ]  # fmt: skip
            bursts = [each.result() for each in sent]
        started = min(burst.started for burst in bursts)
        accepted = max(burst.started + burst.seconds for burst in bursts) - started
        last = the_sink.wait_for(base + messages, timeout, self.problem)
        self._wait_recorded(messages * recipients, timeout)
        received = the_sink.count() - base
        if received != messages:
            raise sink.SinkError(f"{messages} messages relayed but the sink received {received}")
        return last - started, accepted

    def _wait_recorded(self, recipients: int, timeout: float) -> None:
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
            done = subprocess.run([*argv, "-c", f"ALTER SYSTEM SET {setting}"], capture_output=True, text=True,
                                  timeout=60, check=False)  # fmt: skip
            if done.returncode != 0:
                raise MtadError(f"cannot set {setting}: {done.stderr.strip()}")
    finally:
        server.stop()


@functools.cache
def _files() -> dict[str, str]:
    """Each statement of mtad/sql by name, as _shape() makes it."""
    names = (str(path.relative_to(SQL).with_suffix("")) for path in SQL.rglob("*.sql"))
    return {name: _shape(access.sql(name)) for name in names if not name.startswith("functions/")}


def _shape(text: str) -> str:
    """A statement without comments, constants (pg_stat_statements shows them as $n) or spaces."""
    text = re.sub(r"--[^\n]*", "", text)
    text = re.sub(r"'(?:[^']|'')*'|\$\d+|\b\d+(?:\.\d+)?\b", "?", text)
    return re.sub(r"\s+", "", text).lower()


@functools.cache
def _name(query: str) -> str:
    """The .sql file a statement came from (the longest common start), or its start."""
    if "pg_stat" in query or query.startswith(("TRUNCATE", "VACUUM", "CHECKPOINT", "SELECT state, count")):
        return "(bench)"
    shape = _shape(query)
    same = [name for name, statement in _files().items() if statement == shape]
    if same:
        return ", ".join(sorted(same))  # statements alike but for their constants are one to pg_stat_statements
    best, length = "", 0
    for name, statement in _files().items():
        common = next((i for i, (a, b) in enumerate(zip(shape, statement, strict=False)) if a != b),
                      min(len(shape), len(statement)))  # fmt: skip
        if common > length:
            best, length = name, common
    return best if length >= 30 else query[:50]
