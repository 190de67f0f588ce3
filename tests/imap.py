"""A real IMAP server for the tests: Dovecot (Debian's dovecot-imapd), started on a
free loopback port with implicit TLS, its own configuration, users and Maildirs
in a temp dir. Mail is put into a user's inbox the way a delivery agent does: a
file written into Maildir/tmp, then renamed into Maildir/new."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from tests.certs import self_signed

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
START_TIMEOUT = 20.0


def missing() -> str | None:
    """Why the tests that need Dovecot cannot run, or None."""
    if not Path(DOVECOT).exists():
        return "dovecot is not installed (make test installs dovecot-imapd as root)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Dovecot:
    """One Dovecot instance in a temp dir of its own (its processes run as another
    user when the tests run as root, and must reach it: pytest's are 0700), removed
    at `stop`. `user(name, password)` adds a mailbox; `deliver` puts mail into it."""

    def __init__(
        self, tls: tuple[Path, Path] | None = None, introspection: str | None = None, idle: bool = True
    ) -> None:
        """tls: its certificate and key (default: a new self-signed one for localhost);
        introspection: the URL where XOAUTH2 access tokens are checked (RFC 7662:
        a POST of token=..., answered {"active": true, "username": ...}); None: no XOAUTH2."""
        self._introspection = introspection
        self._idle = idle  # False: the server offers no IDLE (clients poll)
        self.directory = directory = Path(tempfile.mkdtemp(prefix="mtad-dovecot-"))
        directory.chmod(0o755)
        self.host = "127.0.0.1"
        self.port = _free_port()
        self.cert, self.key = tls or self_signed(directory, "localhost")
        if os.geteuid() == 0:  # Dovecot refuses root for its processes and the mail
            self._user, self._login_user = "dovecot", "dovenull"
        else:
            self._user = self._login_user = pwd.getpwuid(os.geteuid()).pw_name
        entry = pwd.getpwnam(self._user)
        self._uid, self._gid = entry.pw_uid, entry.pw_gid
        self._passwd = directory / "passwd"
        self._passwd.write_text("")
        self._homes = directory / "home"
        self._homes.mkdir()
        self.config = directory / "dovecot.conf"
        self.log = directory / "dovecot.log"
        self._process: subprocess.Popen[bytes] | None = None

    def _write_config(self) -> None:
        d = self.directory
        self.config.write_text(f"""\
base_dir = {d}/run
state_dir = {d}/state
log_path = {self.log}
protocols = imap
listen = {self.host}
ssl = required
ssl_cert = <{self.cert}
ssl_key = <{self.key}
default_internal_user = {self._user}
default_internal_group = {self._group_name()}
default_login_user = {self._login_user}
first_valid_uid = {min(self._uid, 100)}
auth_mechanisms = plain login{" xoauth2" if self._introspection else ""}
disable_plaintext_auth = yes
passdb {{
  driver = passwd-file
  mechanisms = plain login
  args = scheme=PLAIN {self._passwd}
}}
{self._oauth2_passdb()}
userdb {{
  driver = static
  args = uid={self._uid} gid={self._gid} home={self._homes}/%u
}}
mail_location = maildir:~/Maildir
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Sent {{
    special_use = \\Sent
  }}
}}
{"" if self._idle else "imap_capability = IMAP4rev1 SASL-IR LITERAL+ ID ENABLE UIDPLUS"}
service imap-login {{
  inet_listener imap {{
    port = 0
  }}
  inet_listener imaps {{
    port = {self.port}
    ssl = yes
  }}
}}
service stats {{
  unix_listener stats-reader {{
    mode = 0666
  }}
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
""")

    def _oauth2_passdb(self) -> str:
        if self._introspection is None:
            return ""
        settings = self.directory / "oauth2.conf.ext"
        lines = ("introspection_mode = post", f"introspection_url = {self._introspection}",
                 "username_attribute = username", "active_attribute = active", "active_value = true")  # fmt: skip
        settings.write_text("\n".join(lines) + "\n")
        return f"passdb {{\n  driver = oauth2\n  mechanisms = xoauth2\n  args = {settings}\n}}\n"

    def _group_name(self) -> str:
        import grp

        return grp.getgrgid(self._gid).gr_name

    def start(self) -> None:
        self._write_config()
        for sub in ("run", "state"):
            (self.directory / sub).mkdir(exist_ok=True)
        self._process = subprocess.Popen(
            [DOVECOT, "-F", "-c", str(self.config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"dovecot exited: {self._errors()}")
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=1):
                return
            time.sleep(0.05)  # polls the port it is opening: there is nothing else to wait on
        raise RuntimeError(f"dovecot did not listen on {self.port}: {self._errors()}")

    def _errors(self) -> str:
        text = self.log.read_text() if self.log.exists() else ""
        if self._process is not None and self._process.stderr is not None and self._process.poll() is not None:
            text += self._process.stderr.read().decode(errors="replace")
        return text[-2000:]

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._process is not None and self._process.stderr is not None:
            self._process.stderr.close()
        shutil.rmtree(self.directory, ignore_errors=True)

    def user(self, name: str, password: str) -> None:
        """A mailbox `name` that logs in with `password`, with an empty inbox."""
        with self._passwd.open("a") as f:
            f.write(f"{name}:{password}\n")
        for sub in ("cur", "new", "tmp"):
            path = self._maildir(name) / sub
            path.mkdir(parents=True, exist_ok=True)
        for path in [self._homes / name, *(self._homes / name).rglob("*")]:
            os.chown(path, self._uid, self._gid)

    def _maildir(self, name: str, folder: str | None = None) -> Path:
        inbox = self._homes / name / "Maildir"
        return inbox if folder is None else inbox / ("." + folder.replace("/", "."))  # Maildir++

    def folder(self, name: str, folder: str) -> None:
        """A folder of the user's mailbox besides the inbox ("Sent", "[Gmail]/Sent Mail", ...;
        one named Sent is flagged \\Sent, RFC 6154)."""
        maildir = self._maildir(name, folder)
        for sub in ("cur", "new", "tmp"):
            (maildir / sub).mkdir(parents=True, exist_ok=True)
        for path in [maildir, *maildir.iterdir()]:
            os.chown(path, self._uid, self._gid)

    def deliver(self, name: str, raw: bytes, *, received: float | None = None, folder: str | None = None) -> None:
        """Put the message `raw` into the user's inbox (or `folder`, made by folder()), as
        a delivery agent does; `received`: its arrival time (its IMAP INTERNALDATE), as a
        Unix time."""
        maildir = self._maildir(name, folder)
        unique = f"{time.time_ns()}.{uuid.uuid4().hex}.mtad-tests"
        staged = maildir / "tmp" / unique
        staged.write_bytes(raw.replace(b"\r\n", b"\n"))
        os.chown(staged, self._uid, self._gid)
        if received is not None:
            os.utime(staged, (received, received))
        staged.rename(maildir / "new" / unique)

    def flags(self, name: str) -> list[str]:
        """The Maildir flags of every message of the inbox (the letters after ':2,'), new ones as ''."""
        maildir = self._maildir(name)
        found = ["" for _ in (maildir / "new").iterdir()]
        found += [p.name.partition(":2,")[2] for p in (maildir / "cur").iterdir()]
        return found
