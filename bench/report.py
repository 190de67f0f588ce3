"""What the benchmark reports: the machine, the table of rates, and bench/RESULTS.md.

A cell is one message size and one number of sessions; it holds the rate (messages
per second, wall time of the whole burst) of every run of every server. The table
shows min / median / max per server and the ratio of the medians, mtad / Postfix.
"""

from __future__ import annotations

import os
import platform
import re
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import mtad

if TYPE_CHECKING:
    from bench.cpu import Usage


@dataclass(slots=True)
class Cell:
    size: int
    sessions: int
    messages: int
    rates: dict[str, list[float]] = field(default_factory=dict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    cpu: dict[str, Usage] = field(default_factory=dict)  # by server: the CPU its runs used
    latency: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # by server: each run's p50, p99 ms

    def label(self) -> str:
        return f"{size_label(self.size)}, {self.sessions} session{'s' if self.sessions > 1 else ''}"


def filled(doc: str | None, values: dict[str, str]) -> str:
    """A module docstring after its first paragraph, its upper-case names replaced by
    this run's values (names without one are left as they are)."""
    text = (doc or "").split("\n\n", 1)[1]
    return re.sub(r"\b[A-Z][A-Z_]+\b", lambda m: values.get(m.group(), m.group()), text)


def size_label(size: int) -> str:
    return f"{size // 1024} KB" if size % 1024 == 0 else f"{size} B"


def spread(rates: list[float]) -> str:
    """min / median / max, or "failed" when there is none."""
    if not rates:
        return "failed"
    return " / ".join(f"{x:,.0f}" for x in (min(rates), statistics.median(rates), max(rates)))


def ratio(cell: Cell, a: str = "mtad", b: str = "Postfix") -> float | None:
    if not cell.rates.get(a) or not cell.rates.get(b):
        return None
    return statistics.median(cell.rates[a]) / statistics.median(cell.rates[b])


def table(cells: list[Cell], servers: list[str]) -> str:
    """The results as a Markdown table (readable as plain text too)."""
    head = ["size", "sessions", "msgs/run"]
    head += [f"{name} msgs/s min / median / max" for name in servers]
    compare = "mtad" in servers and "Postfix" in servers
    if compare:
        head.append("mtad/Postfix")
    rows = []
    for cell in cells:
        row = [size_label(cell.size), str(cell.sessions), f"{cell.messages:,}"]
        row += [spread(cell.rates.get(name, [])) for name in servers]
        if compare:
            r = ratio(cell)
            row.append("-" if r is None else f"{r:.2f}")
        rows.append(row)
    return markdown_table(head, rows)


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    """A Markdown table with aligned columns (readable as plain text too)."""
    rows = [head, ["---"] * len(head), *rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = []
    for row in rows:
        if row[0] == "---":
            row = ["-" * w for w in widths]
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
    return "\n".join(lines)


def runs_table(cells: list[Cell], servers: list[str]) -> str:
    """Every run's rate, in the order the runs were made."""
    lines = ["| cell | " + " | ".join(servers) + " |", "|---" * (len(servers) + 1) + "|"]
    for cell in cells:
        per_server = [", ".join(f"{x:,.0f}" for x in cell.rates.get(name, [])) or "-" for name in servers]
        lines.append(f"| {cell.label()} | " + " | ".join(per_server) + " |")
    return "\n".join(lines)


def machine(tmpdir: Path, versions: dict[str, str]) -> dict[str, str]:
    """What the numbers were measured on."""
    info = {
        "CPU": _cpu_model(),
        "cores": str(os.cpu_count()),
        "memory": f"{_mem_total_kib() / 1024 / 1024:.1f} GiB",
        "OS": f"{_os_name()}, Linux {platform.release()}",
        "file system of the spools": _filesystem(tmpdir),
        "Python": f"{platform.python_version()} ({platform.python_implementation()})",
        "mtad": f"{mtad.__version__} (commit {_git_commit()})",
    }
    info.update(versions)
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total_kib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.system()


def _filesystem(path: Path) -> str:
    """Device and type of the mount that holds path (longest mount point that is a prefix)."""
    best = ("", "unknown", "unknown")
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    resolved = str(path.resolve())
    for line in mounts:
        device, point, kind = line.split()[:3]
        if (resolved == point or resolved.startswith(point.rstrip("/") + "/")) and len(point) >= len(best[0]):
            best = (point, device, kind)
    return f"{best[2]} on {best[1]} (mounted on {best[0]})"


def _git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


# The order of the sections in RESULTS.md.
# "history" is written by hand (what made the difference); no part rewrites it.
PARTS = ("accept", "inject", "delivery", "sessions", "memory", "shaping", "accounts", "relay", "dkim", "signed",
         "retention", "feedback", "webhooks", "bounces", "cli", "page", "nodes", "history")  # fmt: skip
_MACHINE_LINE = re.compile(r"^- ([^:\n]+): (.*)$", re.M)
_SECTION = re.compile(r"<!-- bench:(\w+) -->\n(.*?)<!-- /bench:\1 -->\n", re.S)


def section_md(title: str, *, date: str, command: str, seconds: float, body: str, notes: list[str]) -> str:
    """One part's section of RESULTS.md: when and how it was measured, then its text and notes."""
    lines = [
        f"## {title}",
        "",
        f"- date: {date}",
        f"- command: `{command}` (this part took {seconds / 60:.1f} min)",
        f"- mtad: {mtad.__version__} (commit {_git_commit()})",
        "",
        body.rstrip("\n"),
    ]
    if notes:
        lines += ["", "### Notes from this run", "", *(f"- {note}" for note in notes)]
    return "\n".join(lines) + "\n"


def write_results(path: Path, machine: dict[str, str], sections: dict[str, str]) -> None:
    """Write bench/RESULTS.md: the machine, then one section per part, in PARTS order.
    A part that did not run this time (`--only`) keeps the section it had in the file,
    and the machine keeps the versions only those parts reported."""
    kept: dict[str, str] = {}
    if path.exists():
        text = path.read_text()
        kept = dict(_SECTION.findall(text))
        before = text.partition("## Machine\n")[2].partition("<!--")[0]
        machine = dict(_MACHINE_LINE.findall(before)) | machine  # versions of parts that did not run
    kept.update(sections)
    lines = [
        "# mtad benchmarks: accept, delivery, outbound sessions, spool memory",
        "",
        "Written by `python -m bench` (`make bench`): every part rewrites its own section,",
        "and `--only` leaves the sections of the other parts as they were.",
        "",
        "## Machine",
        "",
        *(f"- {key}: {value}" for key, value in machine.items()),
        "",
    ]
    for key in PARTS:
        if key in kept:
            lines += [f"<!-- bench:{key} -->", kept[key].rstrip("\n"), f"<!-- /bench:{key} -->", ""]
    path.write_text("\n".join(lines))
