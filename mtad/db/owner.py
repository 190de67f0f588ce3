"""Who owns an embedded spool: the one `mtad run` on its data directory.

The daemon takes an exclusive flock on `<data_dir>.lock` (beside the data
directory) before it starts or attaches to the server, and holds it until it
exits. A flock rather than PostgreSQL's postmaster.pid: the server outlives a
killed daemon (the next one reattaches to it), while the kernel drops a flock with
its process, kill -9 included, so a dead holder never blocks the next start. The
file also says who holds it (pid, configuration, listen addresses), for the one
refused and for the tools, which look without taking it.

All of this blocks briefly (file system, /proc); call it from a thread or before
the event loop has other work.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]

from mtad.base import errors

SETTLE = 2.0  # seconds a holder has to write who it is after it took the lock


@dataclass(frozen=True, slots=True)
class Holder:
    """A daemon that owns a spool, as its lock file says."""

    pid: int
    data_dir: Path | None  # None: it holds no data directory (a DSN, or still starting)
    config: str = ""
    started_at: str = ""
    listening: Mapping[str, Sequence[str]] = field(default_factory=dict)  # "submission" -> ["127.0.0.1:2525"]

    def describe(self) -> str:
        """`mtad run (pid 4348, configuration /etc/mtad/mtad.toml), listening on ...`"""
        if not self.pid:
            return "a process that did not say who it is (see the lock file beside the data directory)"
        config = f", configuration {self.config}" if self.config else ""
        return f"mtad run (pid {self.pid}{config}), {addresses(self.listening)}"


def addresses(listening: Mapping[str, Sequence[str]]) -> str:
    """`listening on 127.0.0.1:2525 (submission), 127.0.0.1:9108 (http)`, or that it is not yet."""
    named = [f"{address} ({what})" for what, found in listening.items() for address in found]
    return f"listening on {', '.join(named)}" if named else "not listening yet"


def lock_path(data_dir: Path) -> Path:
    data_dir = data_dir.expanduser().resolve()
    return data_dir.with_name(f"{data_dir.name}.lock")


class SpoolLock:
    """The exclusive lock of a daemon on its data directory: `take`, `announce` the
    addresses once bound, `release` (or let the process end)."""

    def __init__(self, data_dir: Path, fd: int, record: dict[str, Any]) -> None:
        self.data_dir = data_dir
        self._fd = fd
        self._record = record

    @classmethod
    def take(cls, data_dir: Path, config: Path | None, listening: Mapping[str, Sequence[str]]) -> SpoolLock:
        """Lock data_dir for this process, or raise SpoolInUse naming the daemon that
        holds it. Creates the data directory's parent when missing."""
        data_dir = data_dir.expanduser().resolve()
        path = lock_path(data_dir)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
        except OSError as exc:
            raise errors.EmbeddedDatabaseError(f"cannot lock the spool {data_dir}: {path}: {exc.strerror}") from None
        deadline = time.monotonic() + SETTLE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                found = _read(path)
                if found is not None or time.monotonic() > deadline:
                    os.close(fd)
                    raise errors.SpoolInUse(_in_use(data_dir, found)) from None
                time.sleep(0.01)  # a tool looking (a shared lock for an instant), or a holder not yet written
        record = {
            "pid": os.getpid(),
            "data_dir": str(data_dir),
            "config": str(config.expanduser().resolve()) if config is not None else "",
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "listening": {k: list(v) for k, v in listening.items()},
        }
        lock = cls(data_dir, fd, record)
        lock._write()
        return lock

    def announce(self, listening: Mapping[str, Sequence[str]]) -> None:
        """Record the addresses bound (a port 0 asked for is the port given)."""
        self._record["listening"] = {k: list(v) for k, v in listening.items() if v}
        self._write()

    def release(self) -> None:
        """Unlock, leaving an empty file (no record of a process that is gone)."""
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def _write(self) -> None:
        data = json.dumps(self._record).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)


def holder(data_dir: Path) -> Holder | None:
    """The daemon that owns data_dir now, or None (no lock file, or no one holds it)."""
    path = lock_path(data_dir)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # none yet; or not ours to read, and then neither is the data directory
    try:
        deadline = time.monotonic() + SETTLE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                found = _read(path)
                if found is not None:
                    return found
                if time.monotonic() > deadline:
                    return Holder(pid=0, data_dir=data_dir)  # held, by a process that did not say who it is
                time.sleep(0.01)
            else:
                return None  # no daemon: the shared lock goes with the close below
    finally:
        os.close(fd)


def daemons_of(config: Path, defaults: Sequence[Path] = ()) -> list[Holder]:
    """The `mtad run` processes started with this configuration file (or with none,
    from a directory where `defaults` finds it), other than this process, each with
    the spool its lock file names (data_dir None: it holds none, so it runs on a
    DSN, or is still starting). Processes of other users whose files cannot be read
    are passed over."""
    try:
        wanted = config.expanduser().resolve()
    except OSError:
        return []
    found: list[Holder] = []
    for process in psutil.process_iter(["pid", "cmdline"]):
        try:
            args = process.info["cmdline"] or []
            if process.info["pid"] == os.getpid() or not _runs(args):
                continue
            given = _config_argument(args)
            cwd = Path(process.cwd())
            if given is None:
                candidates = [cwd / d for d in defaults]
                given = next((c for c in candidates if c.exists()), None)
                if given is None:
                    continue
            if (cwd / given).expanduser().resolve() != wanted:
                continue
            spools = [_read(Path(f.path)) for f in process.open_files() if f.path.endswith(".lock")]
            held = next((s for s in spools if s is not None and s.pid == process.info["pid"]), None)
            found.append(held or Holder(pid=process.info["pid"], data_dir=None, config=str(wanted)))
        except (psutil.Error, OSError):
            continue
    return found


def _runs(args: Sequence[str]) -> bool:
    """Whether a command line is `mtad run` (`.../mtad run`, `python -m mtad run`)."""
    return any(a == "run" and os.path.basename(args[i - 1]) == "mtad" for i, a in enumerate(args) if i > 0)


def _config_argument(args: Sequence[str]) -> Path | None:
    for i, arg in enumerate(args):
        if arg == "--config" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--config="):
            return Path(arg.partition("=")[2])
    return None


def _read(path: Path) -> Holder | None:
    """The holder a lock file names, when it is whole and its process alive."""
    try:
        record = json.loads(path.read_bytes())
        pid = int(record["pid"])
        data_dir = Path(record["data_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not written yet, or being rewritten
    if not psutil.pid_exists(pid):
        return None  # an old record: the process that wrote it is gone
    listening = record.get("listening") or {}
    return Holder(pid, data_dir, str(record.get("config", "")), str(record.get("started_at", "")), listening)


def _in_use(data_dir: Path, found: Holder | None) -> str:
    who = found.describe() if found is not None else "another process"
    return (
        f"the spool {data_dir} is in use by {who}; stop that one first (systemctl stop mtad), "
        "or give this one another [database] data_dir"
    )
