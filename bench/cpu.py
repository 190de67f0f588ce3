"""CPU time spent by each party of a run, from /proc: where a machine's two cores go.

`Meter.start()` then `Meter.stop()` give the CPU seconds (user + system) each party
used in between: mtad (the `mtad run` process), PostgreSQL (every `postgres`
process), Postfix (its daemons, by command name), the sink (`smtp-sink`) and the
client (`smtp-source`, a child of this process: counted once it has exited, through
this process's children times). A process that exits during the run is counted by
its parent once reaped (a PostgreSQL backend by the postmaster, a Postfix daemon by
its master), through the parent's children times.
"""

from __future__ import annotations

import os
from pathlib import Path

POSTFIX = frozenset({"master", "smtpd", "cleanup", "qmgr", "smtp", "trivial-rewrite", "postlogd", "anvil",
                     "scache", "bounce", "proxymap", "tlsmgr", "pickup", "showq", "local", "discard"})  # fmt: skip
PARTIES = ("mtad", "PostgreSQL", "Postfix", "sink", "client")
_TICK = os.sysconf("SC_CLK_TCK")


def snapshot() -> dict[str, float]:
    """CPU seconds so far per party (live processes and the children they reaped)."""
    used = dict.fromkeys(PARTIES, 0.0)
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
        seconds = sum(int(f) for f in fields[11:15]) / _TICK  # utime, stime, cutime, cstime
        if b"mtad run" in command:
            party = "mtad"
        elif name == "postgres":
            party = "PostgreSQL"
        elif name in POSTFIX:
            party = "Postfix"
        elif name == "smtp-sink":
            party = "sink"
        else:
            continue
        used[party] += seconds
    own = os.times()
    used["client"] = own.children_user + own.children_system  # smtp-source, once reaped
    return used


class Meter:
    def __init__(self) -> None:
        self._before: dict[str, float] = {}

    def start(self) -> None:
        self._before = snapshot()

    def stop(self) -> dict[str, float]:
        """CPU seconds per party since start()."""
        after = snapshot()
        return {party: max(0.0, after[party] - self._before.get(party, 0.0)) for party in PARTIES}
