"""OpenDKIM under test: Debian's `opendkim` as a signing milter on loopback, in a temp dir.

Not the system's filter: `opendkim -f -x FILE` with a configuration written here, in
the foreground as a child of the benchmark, listening on 127.0.0.1:<free port>
(Postfix's `smtpd_milters = inet:127.0.0.1:PORT`). It only signs (Mode s): mail
whose From domain is `domain`, from 127.0.0.1 (its default InternalHosts), with
one RSA key file under `selector`, relaxed/relaxed, over the header fields mtad
signs (mtad.signing.dkim.SIGNED, when present) with From over-signed, as mtad does.
It logs nothing (no syslog here); what it says on stderr goes to a file.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bench import server, sink
from bench.server import Managed
from mtad.signing import dkim

START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0

CONF = """\
# A private signing filter for the benchmark: loopback only, signs, never verifies.
Mode s
Background no
Syslog no
Socket inet:{port}@[127.0.0.1]
PidFile {root}/opendkim.pid
Domain {domain}
Selector {selector}
KeyFile {key}
# The key is 0600, but below the system's temp dir, which everyone may write: opendkim would refuse it.
RequireSafeKeys no
Canonicalization relaxed/relaxed
SignatureAlgorithm rsa-sha256
SignHeaders {headers}
OversignHeaders From
"""


class OpendkimError(Exception):
    """opendkim could not be configured or started, or died."""


def program() -> str | None:
    """Path of opendkim (Debian's package installs it in /usr/sbin), or None."""
    return shutil.which("opendkim") or shutil.which("opendkim", path="/usr/sbin:/usr/bin")


class Opendkim(Managed):
    """A running private opendkim; use as a context manager (terminated on exit)."""

    name = "opendkim"

    def __init__(self, workdir: Path, domain: str, selector: str, pem: bytes) -> None:
        self.workdir = workdir
        self.domain, self.selector, self.pem = domain, selector, pem
        self.host = "127.0.0.1"
        self.port = 0
        self.version = ""
        self.stderr_log = workdir / "stderr.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def milter(self) -> str:
        """The socket as Postfix's smtpd_milters names it."""
        return f"inet:{self.host}:{self.port}"

    def start(self) -> None:
        """Write the key and the configuration, start the filter; listening when it returns."""
        path = program()
        if path is None:
            raise OpendkimError("opendkim is missing: `make bench` installs Debian's package opendkim as root")
        self.workdir.mkdir(parents=True, exist_ok=True)
        key = self.workdir / f"{self.selector}.private"
        key.write_bytes(self.pem)
        key.chmod(0o600)
        self.port = sink.free_port(self.host)
        headers = ",".join(name.decode() for name in dkim.SIGNED)
        conf = self.workdir / "opendkim.conf"
        conf.write_text(CONF.format(port=self.port, root=self.workdir, domain=self.domain, selector=self.selector,
                                    key=key, headers=headers))  # fmt: skip
        said = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=START_TIMEOUT, check=False)
        self.version = said.stdout.splitlines()[0].split(": ", 1)[-1].strip() if said.stdout else "?"
        checked = subprocess.run(
            [path, "-n", "-x", str(conf)], capture_output=True, text=True, timeout=START_TIMEOUT, check=False
        )
        if checked.returncode != 0:
            raise OpendkimError(f"opendkim -n refused {conf}: {(checked.stderr or checked.stdout).strip()}")
        with self.stderr_log.open("wb") as stderr:
            self._process = subprocess.Popen(
                [path, "-f", "-x", str(conf)], stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr
            )
        self._wait_listening()

    def _wait_listening(self) -> None:
        """Connect until the filter accepts (bounded), or say why it exited."""
        assert self._process is not None
        why = server.wait_listening(self._process, (self.host, self.port), START_TIMEOUT)
        if why is not None:
            raise OpendkimError(f"opendkim {why}{self._stderr_tail()}")

    def said(self) -> list[str]:
        """What the filter wrote on stderr (read after the runs)."""
        try:
            return [line.strip() for line in self.stderr_log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            return []

    def stop(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(STOP_TIMEOUT)

    def _stderr_tail(self) -> str:
        lines = self.said()[-10:]
        return ("\n" + "\n".join(lines)) if lines else ""


def missing() -> str | None:
    """Why opendkim cannot run here, or None."""
    if program() is None:
        return "opendkim is not installed: `make bench` installs Debian's package opendkim when run as root"
    return None
