"""The command line's own cost: each command timed as a whole process, as an operator runs it.

COMMANDS are each run RUNS times in turn (after one run of each not counted, which
warms the disk cache and writes the bytecode, as an installed package has it: the
commands run without PYTHONDONTWRITEBYTECODE, their bytecode kept in the part's temp
dir by PYTHONPYCACHEPREFIX), as `mtad ...` from the venv, against a running node (`mtad run`
with its embedded PostgreSQL, accept only) and its configuration file: wall time from
the fork to the exit (interpreter start, imports, configuration, the database
attached to, the work, the exit), and the CPU (user + system) the command's process
used, from the kernel's accounting of the reaped child. PostgreSQL's backend and the
node's work (a reload's new configuration) are not in the CPU column. The spool holds
only what the node wrote at start: `queue ls` lists nothing, `events tail` prints none,
so the figures are the commands' fixed cost. Goal (issue 33): every command under 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import report
from bench.mtad_server import MtadError, MtadServer

ERRORS = (MtadError, OSError, subprocess.SubprocessError)
# (label, arguments after `mtad`); --config is added to those that take it.
COMMANDS = (
    ("mtad --help", ["--help"]),
    ("mtad check-config", ["check-config"]),
    ("mtad reload", ["reload"]),
    ("mtad queue ls", ["queue", "ls"]),
    ("mtad events tail", ["events", "tail"]),
)
RUNS, QUICK_RUNS = 10, 3
GOAL = 0.3  # seconds of wall time, each command (median)
TIMEOUT = 60.0


@dataclass
class Cell:
    label: str
    argv: list[str]
    wall: list[float] = field(default_factory=list)  # seconds
    cpu: list[float] = field(default_factory=list)  # seconds, user + system
    failures: list[str] = field(default_factory=list)


def mtad_command() -> list[str]:
    """`mtad` as installed beside this interpreter, else `python -m mtad`."""
    script = Path(sys.executable).parent / "mtad"
    return [str(script)] if script.exists() else [sys.executable, "-m", "mtad"]


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """One run: (wall seconds, CPU seconds of the process, exit status, its stderr's last line)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT,
                          check=False, env=env)  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    said = (done.stderr.strip().splitlines() or [""])[-1]
    return wall, cpu, done.returncode, said


def environment(root: Path) -> dict[str, str]:
    """The commands' environment: bytecode written (under `root`) and read again."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    return env


def measure(cells: list[Cell], runs: int, env: dict[str, str]) -> None:
    """Warm up once, then the commands in turn, `runs` rounds."""
    for cell in cells:
        timed(cell.argv, env)
    for _ in range(runs):
        for cell in cells:
            wall, cpu, status, said = timed(cell.argv, env)
            if status != 0:
                cell.failures.append(f"exit {status}: {said}")
                continue
            cell.wall.append(wall)
            cell.cpu.append(cpu)


def ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f}" if values else "-"


def table(cells: list[Cell]) -> str:
    rows = []
    for cell in cells:
        if not cell.wall:
            rows.append([f"`{cell.label}`", "failed", "-", "-", "-", "-"])
            continue
        met = statistics.median(cell.wall) < GOAL
        rows.append([f"`{cell.label}`", ms(cell.wall), f"{min(cell.wall) * 1000:.0f}",
                     f"{max(cell.wall) * 1000:.0f}", ms(cell.cpu), "met" if met else "not met"])  # fmt: skip
    return report.markdown_table(
        ["command", "wall ms median", "min", "max", "CPU ms (user + sys) median", f"under {GOAL:g} s"], rows
    )


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    runs = args.runs or (QUICK_RUNS if args.quick else RUNS)
    notes: list[str] = []
    with MtadServer(root / "mtad") as node:
        config = ["--config", str(node.workdir / "mtad.toml")]
        cells = [Cell(label, [*mtad_command(), *argv, *(config if argv != ["--help"] else [])])
                 for label, argv in COMMANDS]  # fmt: skip
        print(f"{runs} runs of each command, in turn, against a running node", flush=True)
        measure(cells, runs, environment(root))
    for cell in cells:
        if cell.failures:
            notes.append(f"{cell.label}: {len(cell.failures)} run(s) failed, first: {cell.failures[0]}")
    md = table(cells)
    print(md)
    medians = [statistics.median(cell.wall) for cell in cells if cell.wall]
    met = len(medians) == len(cells) and max(medians) < GOAL
    summary = (f"Goal, every command under {GOAL:g} s (median wall time): {'met' if met else 'not met'}; "
               f"the slowest took {max(medians) * 1000:.0f} ms." if medians else "No command ran.")  # fmt: skip
    print(summary)
    method = (__doc__ or "").split("\n\n", 1)[1].strip()
    method = method.replace("COMMANDS", ", ".join(f"`{label}`" for label, _ in COMMANDS)).replace("RUNS", str(runs))
    body = f"### Method\n\n{method}\n\n### Results\n\n{md}\n\n{summary}"
    return body, notes, not notes
