"""Postfix under test: a private instance from Debian's package, in a temp dir, on hold or relaying.

Not the system's Postfix: `postfix -c DIR` with a main.cf and master.cf written here,
its own queue and data directories, smtpd on 127.0.0.1:<free port> only. fsync is
left as Postfix ships it (on). Logging goes to a file through postlogd, as mtad's
log goes to a file.

On hold (the accept benchmark): every message is accepted on hold
(`smtpd_end_of_data_restrictions = check_client_access static:HOLD`): cleanup writes
the queue file, fsyncs it and moves it to hold/ before smtpd answers 250, and the
queue manager never sees it. Nothing can be delivered anyway: local, relay and
default transports all discard.

Relaying (the delivery benchmark, `relay=(host, port)`): nothing is held; every
message goes through the queue manager to the smtp client, which sends it to the
relay host (the sink) with `concurrency` sessions at most, kept in Postfix's
connection cache and reused.

Between runs `reset()` deletes every queued message with postsuper.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import stat
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.server import Managed
from tests.pids import wait_exit

TIMEOUT = 60.0
_STATUS = re.compile(rb" status=(\w+)")

MAIN_CF = """\
# A private Postfix for the benchmark: loopback only.
compatibility_level = 3.6
config_directory = {root}/etc
queue_directory = {root}/queue
data_directory = {root}/data
mail_owner = postfix
setgid_group = postdrop
myhostname = postfix-bench.localdomain
mydomain = localdomain
myorigin = $myhostname
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
mydestination =
relay_domains =
local_recipient_maps =
alias_maps =
alias_database =
smtpd_relay_restrictions = permit_mynetworks, reject
smtpd_recipient_restrictions = permit_mynetworks, reject
smtpd_banner = $myhostname ESMTP
biff = no
maillog_file = {root}/maillog
maillog_file_prefixes = {root}
"""

HOLD_CF = """\
# Keep what is accepted on hold: accept durably, like mtad, and go no further.
smtpd_end_of_data_restrictions = check_client_access static:HOLD
local_transport = discard:no local delivery in the benchmark
relay_transport = discard:no delivery in the benchmark
default_transport = discard:no delivery in the benchmark
"""

RELAY_CF = """\
# Relay everything to the sink, at most {concurrency} sessions, cached and reused.
relayhost = [{host}]:{port}
local_transport = discard:no local delivery in the benchmark
relay_transport = smtp
default_transport = smtp
default_destination_concurrency_limit = {concurrency}
smtp_destination_concurrency_limit = {concurrency}
smtp_connection_cache_destinations = $relayhost
"""

# The services smtpd and cleanup need, none chrooted; smtpd on the loopback port only.
MASTER_CF = """\
127.0.0.1:{port} inet n - n - - smtpd
pickup    unix  n - n 60    1 pickup
cleanup   unix  n - n -     0 cleanup
qmgr      unix  n - n 300   1 qmgr
rewrite   unix  - - n -     - trivial-rewrite
bounce    unix  - - n -     0 bounce
defer     unix  - - n -     0 bounce
trace     unix  - - n -     0 bounce
verify    unix  - - n -     1 verify
flush     unix  n - n 1000? 0 flush
proxymap  unix  - - n -     - proxymap
showq     unix  n - n -     - showq
error     unix  - - n -     - error
retry     unix  - - n -     - error
discard   unix  - - n -     - discard
anvil     unix  - - n -     1 anvil
scache    unix  - - n -     1 scache
postlog   unix-dgram n - n - 1 postlogd
"""
RELAY_MASTER_CF = "smtp      unix  - - n -     - smtp\n"


class PostfixError(Exception):
    """The private Postfix could not be set up, started or emptied."""


def missing() -> str | None:
    """Why Postfix cannot run here, or None when it can."""
    if shutil.which("postfix", path="/usr/sbin:/usr/bin:" + os.environ.get("PATH", "")) is None:
        return "Postfix is not installed: `make bench` installs Debian's package postfix when run as root"
    if os.geteuid() != 0:
        return "a private Postfix instance needs root (its master process starts as root)"
    return None


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostfixServer(Managed):
    """A running private Postfix; use as a context manager (stopped on exit, even on error)."""

    name = "Postfix"

    def __init__(
        self, workdir: Path, relay: tuple[str, int] | None = None, concurrency: int = 50, extra: str = ""
    ) -> None:
        self.workdir = workdir
        self.relay = relay
        self.concurrency = concurrency
        self.extra = extra  # more main.cf lines, appended as they are (a milter, transport maps)
        self._log_offset = 0
        self._statuses: Counter[str] = Counter()
        self.config_dir = workdir / "etc"
        self.queue_dir = workdir / "queue"
        self.host = "127.0.0.1"
        self.port = 0
        self.version = ""
        self._started = False

    def _postfix(self, *args: str, program: str = "postfix") -> str:
        argv = [program, "-c", str(self.config_dir), *args]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        except subprocess.TimeoutExpired:
            raise PostfixError(f"{' '.join(argv)} did not finish within {TIMEOUT:.0f} s") from None
        if done.returncode != 0:
            raise PostfixError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}{self._log_tail()}")
        return done.stdout + done.stderr

    def start(self) -> None:
        """Write the configuration, create the queue and start master; listening when it returns."""
        self.port = free_port()
        # Postfix's daemons run as the postfix user and need to reach the queue directory.
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.workdir.chmod(0o755)
        for parent in self.workdir.parents:
            if not parent.stat().st_mode & stat.S_IXOTH:
                raise PostfixError(f"{parent} must be searchable by all: the postfix user goes through it")
        for sub in ("etc", "queue", "data"):
            (self.workdir / sub).mkdir(exist_ok=True)
        shutil.chown(self.workdir / "data", "postfix", "postfix")
        main_cf, master_cf = MAIN_CF.format(root=self.workdir), MASTER_CF.format(port=self.port)
        if self.relay is None:
            main_cf += HOLD_CF
        else:
            main_cf += RELAY_CF.format(host=self.relay[0], port=self.relay[1], concurrency=self.concurrency)
            master_cf += RELAY_MASTER_CF
        (self.config_dir / "main.cf").write_text(main_cf + self.extra)
        (self.config_dir / "master.cf").write_text(master_cf)
        self.version = subprocess.run(
            ["postconf", "-c", str(self.config_dir), "-h", "mail_version"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=True,
        ).stdout.strip()
        self._postfix("check")  # creates the queue directories with their owners
        self._postfix("start")  # master -w: returns once master has bound its sockets
        self._started = True
        with socket.create_connection((self.host, self.port), timeout=TIMEOUT) as sock:
            sock.settimeout(TIMEOUT)
            greeting = sock.recv(512)
        if not greeting.startswith(b"220"):
            raise PostfixError(f"Postfix greeted with {greeting!r}{self._log_tail()}")

    def reset(self) -> None:
        """Delete every queued message."""
        self._postfix("-d", "ALL", program="postsuper")
        left = self.queued()
        if left:
            raise PostfixError(f"postsuper -d ALL left {left} queue files")

    def stored(self) -> int:
        """Messages on hold; raises when a message is anywhere else in the queue."""
        elsewhere = self.queued() - self._files("hold")
        if elsewhere:
            raise PostfixError(f"{elsewhere} queue files outside hold/")
        return self._files("hold")

    def queued(self) -> int:
        return sum(self._files(queue) for queue in ("maildrop", "incoming", "active", "deferred", "hold"))

    def _files(self, queue: str) -> int:
        return sum(len(files) for _, _, files in os.walk(self.queue_dir / queue))

    def statuses(self) -> Counter[str]:
        """Delivery statuses logged so far (`status=sent`, `deferred`, ...), one per recipient.

        Reads only what the log gained since the last call."""
        try:
            with (self.workdir / "maillog").open("rb") as log:
                log.seek(self._log_offset)
                text = log.read()
        except OSError:
            return self._statuses
        text = text[: text.rfind(b"\n") + 1]  # a line being written is read next time
        self._log_offset += len(text)
        self._statuses.update(status.decode() for status in _STATUS.findall(text))
        return self._statuses

    def log_problems(self) -> dict[str, int]:
        """Warnings, errors and fatal lines of Postfix's log, by text (read after the runs)."""
        problems: dict[str, int] = {}
        try:
            lines = (self.workdir / "maillog").read_text(errors="replace").splitlines()
        except OSError:
            return problems
        for line in lines:
            for level in ("warning:", "error:", "fatal:", "panic:", "reject:"):
                if level in line:
                    text = line.split(level, 1)[1].strip()[:100]
                    problems[f"{level} {text}"] = problems.get(f"{level} {text}", 0) + 1
        return problems

    def stop(self) -> None:
        """`postfix stop`, then wait for master and its children to exit (abort if they do not)."""
        if not self._started:
            return
        self._started = False
        master = self._master_pid()
        processes = [master, *_children(master)] if master else []
        try:
            self._postfix("stop")
        except PostfixError as exc:
            print(f"note: {exc}", file=sys.stderr)
        if not wait_exit(processes, TIMEOUT):
            print("note: Postfix did not stop in time; postfix abort", file=sys.stderr)
            try:
                self._postfix("abort")
            except PostfixError as exc:
                print(f"note: {exc}", file=sys.stderr)
            wait_exit(processes, TIMEOUT)

    def pids(self) -> tuple[int, ...]:
        """The master process: the root of every process of this instance."""
        master = self._master_pid()
        return (master,) if master else ()

    def _master_pid(self) -> int | None:
        try:
            return int((self.queue_dir / "pid" / "master.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def _log_tail(self) -> str:
        try:
            lines = (self.workdir / "maillog").read_text(errors="replace").splitlines()[-10:]
        except OSError:
            return ""
        return ("\n" + "\n".join(lines)) if lines else ""


def _children(parent: int) -> list[int]:
    """Processes whose parent is `parent` (Postfix's daemons under its master)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "stat").read_text()
        except OSError:
            continue
        if int(line.rsplit(")", 1)[1].split()[1]) == parent:  # the field after the name is the parent id
            found.append(int(entry.name))
    return found
