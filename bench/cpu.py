"""CPU time spent by each party of a run, from /proc: where a machine's two cores go.

`Meter.start()` then `Meter.stop()` give the CPU seconds (user + system) each party
used in between: mtad (the `mtad run` process, its submission and DKIM signing processes),
PostgreSQL (every `postgres` process), Postfix (its daemons, by command name), opendkim (Postfix's signing milter), the
bare aiosmtpd reference server of the accept part, the sink (`smtp-sink`) and the
client (`smtp-source`, a child of this process: counted once it has exited, through
this process's children times). A process that exits during the run is counted by
its parent once reaped (a PostgreSQL backend by the postmaster, a Postfix daemon by
its master), through the parent's children times.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import report

POSTFIX = frozenset({"master", "smtpd", "cleanup", "qmgr", "smtp", "trivial-rewrite", "postlogd", "anvil",
                     "scache", "bounce", "proxymap", "tlsmgr", "pickup", "showq", "local", "discard"})  # fmt: skip
PARTIES = ("mtad", "PostgreSQL", "Postfix", "opendkim", "bare aiosmtpd", "receiver", "sink", "client")
NOTE = """\
The CPU time (user + system, from /proc) each party used during a run, divided by
the messages: mtad is the `mtad run` process with its submission and DKIM signing
processes, PostgreSQL every `postgres` process, Postfix its daemons, opendkim
Postfix's signing milter, client `smtp-source`. The machine has 2 cores: at 100 %
it gives 2,000 ms of CPU a second, so a total of T ms per message bounds the rate
at 2,000 / T msgs/s, however the work is spread. Cores busy: all the parties' CPU
time over the run's wall time, as a share of the machine's cores (the rest idle,
or other processes; kernel threads such as the disk's are in neither)."""
_TICK = os.sysconf("SC_CLK_TCK")


def snapshot(scope: Collection[int] = ()) -> dict[str, float]:
    """CPU seconds so far per party (live processes and the children they reaped).

    With `scope`, only the processes of those pids and their descendants count (the
    client aside): the servers of others sharing the machine stay out of the figures."""
    used = dict.fromkeys(PARTIES, 0.0)
    parents: dict[int, int] = {}
    seen: list[tuple[int, str, float]] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:  # exited meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        seconds = sum(int(f) for f in fields[11:15]) / _TICK  # utime, stime, cutime, cstime
        if b"mtad run" in command or b"mtad.submission.child" in command or b"mtad.signing.rsa_worker" in command:
            party = "mtad"  # the daemon, its submission and signing processes
        elif b"bench.bare" in command:
            party = "bare aiosmtpd"
        elif b"bench.webhook_receiver" in command:
            party = "receiver"
        elif name == "postgres":
            party = "PostgreSQL"
        elif name in POSTFIX:
            party = "Postfix"
        elif name == "opendkim":
            party = "opendkim"
        elif name == "smtp-sink":
            party = "sink"
        else:
            continue
        seen.append((int(entry.name), party, seconds))
    roots = frozenset(scope)
    for pid, party, seconds in seen:
        if not roots or _within(pid, roots, parents):
            used[party] += seconds
    own = os.times()
    used["client"] = own.children_user + own.children_system  # smtp-source, once reaped
    return used


def _within(pid: int, roots: frozenset[int], parents: dict[int, int]) -> bool:
    """Whether pid is one of roots or descends from one."""
    while pid > 1:
        if pid in roots:
            return True
        pid = parents.get(pid, 0)
    return False


class Meter:
    """The CPU the parties use between start() and stop(); `scope` as in snapshot()."""

    def __init__(self, scope: Collection[int] = ()) -> None:
        self._scope = scope
        self._before: dict[str, float] = {}
        self._started = 0.0

    def start(self) -> None:
        self._before = snapshot(self._scope)
        self._started = time.monotonic()

    def stop(self, messages: int, client: float | None = None) -> Run:
        """What each party used since start(), per message. `client`: the CPU seconds a
        client measured itself over the run, in place of the reaped children's times
        (its start-up and preparation, before the run, left out)."""
        after = snapshot(self._scope)
        wall = time.monotonic() - self._started
        used = {party: max(0.0, after[party] - self._before.get(party, 0.0)) for party in PARTIES}
        if client is not None:
            used["client"] = client
        return Run(
            {p: s / messages * 1000 for p, s in used.items()}, sum(used.values()) / ((os.cpu_count() or 1) * wall)
        )


@dataclass(frozen=True, slots=True)
class Run:
    ms: dict[str, float]  # CPU ms per message, by party
    busy: float  # the share of the machine's cores all the parties used


@dataclass(slots=True)
class Usage:
    """The runs of one server in one cell."""

    cell: str
    server: str
    runs: list[Run] = field(default_factory=list)


def table(usages: Sequence[Usage]) -> str:
    """CPU ms per message by party (medians of the runs), the total and how busy the cores were."""
    measured = [u for u in usages if u.runs]
    parties = [p for p in PARTIES if any(run.ms[p] >= 0.005 for u in measured for run in u.runs)]
    rows = []
    for usage in measured:
        medians = [statistics.median(run.ms[p] for run in usage.runs) for p in parties]
        total = statistics.median(sum(run.ms.values()) for run in usage.runs)
        busy = statistics.median(run.busy for run in usage.runs)
        rows.append([usage.cell, usage.server, *(f"{m:.2f}" for m in medians), f"{total:.2f}", f"{busy:.0%}"])
    return report.markdown_table(["cell", "server", *parties, "total", "cores busy"], rows)
