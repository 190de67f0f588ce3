"""The sessions part: how many outbound SMTP sessions one process holds open at once.

What is measured: mtad's own session pool (`mtad.sessions.Pool`), in one Python process
on uvloop like the daemon, opening sessions to ADDRESSES smtp-sink processes, one on
each of 127.0.0.2, 127.0.0.3, ... (the same port). The sessions are opened in waves:
each wave sends one message through TARGET / WAVES new sessions at once (concurrent
transactions to an address each open a session, up to `max_per_host`), to addresses
no earlier wave used, so nothing is reused yet. After each wave: sessions open (the
pool's `statistics().open`), errors, the process's resident memory and open files.
The process first raises its RLIMIT_NOFILE to the hard limit. A wave with an error
ends the opening (one attempt, no retries).

Then every session carries one more message, all at once: a session that died
meanwhile would be replaced (`opened` grows) or fail, so this checks that all were
held open and usable at the same time. Then `pool.close()` closes them.

Run as a module (`python -m bench.outbound PORT ADDRESSES TARGET WAVES`), the process
under test prints one JSON object per line; `run()` starts the sinks, runs it, and
stops everything.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import report, sink
from bench.mtad_server import rss_kib

TARGET = 10_000
ADDRESSES = 100
WAVES = 10
ERRORS = (sink.SinkError, OSError, ValueError)


def _address(index: int) -> str:
    """The index-th sink address: 127.0.0.2, 127.0.0.3, ... (up to 127.0.255.254)."""
    number = index + 2
    return f"127.0.{number // 256}.{number % 256}"


def run(args: argparse.Namespace, root: Path, versions: dict[str, str]) -> tuple[str, list[str], bool]:
    """Start the sinks, run the process under test, and tabulate what it printed."""
    target = args.outbound_sessions or (TARGET // 10 if args.quick else TARGET)
    addresses = min(ADDRESSES, target)
    per_address = -(-target // addresses)
    port = sink.free_port()
    lines: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        print(f"starting {addresses} smtp-sink processes on 127.0.0.2 ... {_address(addresses - 1)}:{port}", flush=True)
        for index in range(addresses):
            # -t: the sink must not drop idle sessions while they are held open.
            stack.enter_context(
                sink.Sink(_address(index), port, count=False, max_connections=per_address + 16, idle_timeout=900)
            )
        argv = [sys.executable, "-m", "bench.outbound", str(port), str(addresses), str(target), str(WAVES)]
        with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
            assert child.stdout is not None
            for line in child.stdout:  # bounded: every wait in the child is under a timeout
                lines.append(json.loads(line))
                print(f"  {line.strip()}", flush=True)
            child.wait()
        if child.returncode != 0:
            raise sink.SinkError(f"the session process exited with status {child.returncode}")
    waves = [line for line in lines if "wave" in line]
    final = next((line for line in lines if "held" in line), None)
    if final is None:
        raise sink.SinkError("the session process printed no result")
    rows = [
        [
            str(w["wave"]),
            f"{w['open']:,}",
            str(w["errors"]),
            f"{w['seconds']:.2f}",
            f"{w['rss_kib'] / 1024:.0f}",
            f"{w['fds']:,}",
        ]
        for w in waves
    ]
    table = report.markdown_table(["wave", "sessions open", "errors", "seconds", "RSS MiB", "open files"], rows)
    held, ok = final["held"], final["ok"] is True
    per_session = (final["rss_kib"] - final["rss_before_kib"]) / max(1, held)
    summary = (
        f"**{held:,} sessions held open at once** by one process (goal 10,000), to {addresses} sink addresses; "
        f"{'no errors' if ok else 'with errors: ' + str(final['problem'])}. One more message through every "
        f"session at once: {final['reused']:,} reused, {final['reuse_errors']} errors, {final['opened']:,} opened "
        f"in all. Resident memory {final['rss_before_kib'] / 1024:.0f} MiB before, "
        f"{final['rss_kib'] / 1024:.0f} MiB with them open: {per_session:.1f} KiB per session. "
        f"RLIMIT_NOFILE raised to {final['nofile']:,}. `pool.close()` took {final['close_seconds']:.2f} s "
        f"and left {final['open_after_close']} open."
    )
    print(summary, flush=True)
    method = f"""\
mtad's session pool (`mtad.sessions.Pool`, `Settings(port=PORT, max_per_host={per_address},
idle_timeout=600, max_messages=1000)`) in one Python process on uvloop, against {addresses} `smtp-sink`
processes (one per loopback address 127.0.0.2 ... {_address(addresses - 1)}, `-m {per_address + 16} -t 900`).
{WAVES} waves each open {target // WAVES:,} sessions by sending one message (1 KB, one recipient) through
each at once, to addresses not used before; then one more message goes through every session at once
(each reuses an idle session), then `pool.close()`. Resident memory is the process's VmRSS."""
    body = f"### Method\n\n{method}\n\n### Result\n\n{summary}\n\n{table}"
    return body, [], ok


# --- the process under test ------------------------------------------------------------------


async def _hold(port: int, addresses: int, target: int, waves: int) -> None:
    from mtad.outbound import sessions

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    per_address = -(-target // addresses)
    settings = sessions.Settings(
        port=port, ehlo_hostname="bench.example.org", max_per_host=per_address, idle_timeout=600, max_messages=1000
    )
    pool = sessions.Pool(settings)
    body = b"Subject: held open\r\n\r\n" + b"x" * 1000 + b"\r\n"
    rss_before = rss_kib(os.getpid())
    counter = iter(range(10**9))

    async def one(index: int) -> str | None:
        """One message through the pool to sink `index`; what went wrong, or None."""
        tx = sessions.Transaction("bench@example.org", (f"{next(counter)}rcpt@example.com",), body)
        result = await pool.deliver([sessions.Target(_address(index), _address(index), port)], tx)
        if result.failure is not None:
            return result.failure.value
        bad = [reply.line() for reply in result.replies.values() if reply.code != 250]
        return bad[0] if bad else None

    async def burst(indexes: range) -> list[str]:
        async with asyncio.timeout(300):
            done = await asyncio.gather(*(one(i) for i in indexes for _ in range(per_address)))
        return [problem for problem in done if problem]

    def emit(**fields: object) -> None:
        print(json.dumps(fields), flush=True)

    problem = None
    per_wave = -(-addresses // waves)
    for wave in range(waves):
        indexes = range(wave * per_wave, min(addresses, (wave + 1) * per_wave))
        if not indexes:
            break
        started = time.perf_counter()
        problems = await burst(indexes)
        stats = pool.statistics()
        emit(
            wave=wave + 1,
            open=stats.open,
            errors=len(problems),
            seconds=time.perf_counter() - started,
            rss_kib=rss_kib(os.getpid()),
            fds=len(os.listdir("/proc/self/fd")),
        )
        if problems:
            problem = f"{len(problems)} errors in wave {wave + 1}, first: {problems[0]}"
            break
    held = pool.statistics().open
    rss_held = rss_kib(os.getpid())
    before = pool.statistics().reused
    reuse_problems = await burst(range(addresses)) if problem is None else []
    stats = pool.statistics()
    started = time.perf_counter()
    await pool.close()
    emit(
        held=held,
        ok=problem is None and not reuse_problems and stats.opened == held == target,
        problem=problem or (reuse_problems[0] if reuse_problems else None),
        reused=stats.reused - before,
        reuse_errors=len(reuse_problems),
        opened=stats.opened,
        rss_before_kib=rss_before,
        rss_kib=rss_held,
        nofile=hard,
        close_seconds=time.perf_counter() - started,
        open_after_close=pool.statistics().open,
    )


if __name__ == "__main__":
    import uvloop

    port, addresses, target, waves = map(int, sys.argv[1:5])
    uvloop.run(_hold(port, addresses, target, waves))
