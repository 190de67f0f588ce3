"""`mtad sendmail` (also the command `mtad-sendmail`): the sendmail command line that
applications call (PHP's mail(), cron, `mail -s`, git send-email), handing the
message on standard input to this node's submission port over SMTP, with AUTH
when [sendmail] gives a login.

It takes the options those callers use: -t (recipients from To, Cc and Bcc, which
is removed, besides those given), -i and -oi (a line of one dot does not end the
message), -f and -r (the envelope sender), -F (the sender's full name, for a From
it adds), -C and --config (mtad's configuration), -v (the SMTP dialogue on stderr),
-bm; the other options of sendmail it accepts and ignores. It queues nothing
itself: the message is spooled when the port says 250, or the exit status says
why not, as sendmail's (sysexits.h): 0 sent, 64 bad usage, 65 a message the port
refused, 67 a recipient refused, 75 try again (the daemon is down or answered
4xx), 77 the login refused, 78 the configuration.

sendmail's command line (-oi, -FName, -bs) is parsed by hand: argparse cannot
read options whose letters run into their values.
"""

from __future__ import annotations

import getpass
import ipaddress
import re
import smtplib
import ssl
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.utils import formataddr, getaddresses
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mtad.base.errors import UsageError

if TYPE_CHECKING:
    from mtad.base.endpoints import HostPort

EX_OK, EX_USAGE, EX_DATAERR, EX_NOUSER, EX_SOFTWARE, EX_TEMPFAIL, EX_NOPERM, EX_CONFIG = 0, 64, 65, 67, 70, 75, 77, 78
TIMEOUT = 60.0  # seconds for the connection and each reply
_VALUED = set("BCdFfhLNOpqRrVX")  # the options that take a value, attached or as the next argument
_IGNORED = set("BdhLNOpqRVXGUnmv")  # accepted and without effect here (-v has its own)
_MODES = {"m": None, "s": "-bs (SMTP on standard input): connect to the submission port itself",
          "p": "-bp (the queue): `mtad queue ls`", "i": "-bi (aliases): mtad has none",
          "d": "-bd (a daemon): `mtad run`", "v": "-bv (verify): not supported",
          "t": "-bt (address test): not supported"}  # fmt: skip
_LINE_END = re.compile(rb"\r?\n")
USAGE = """usage: mtad-sendmail [-t] [-i] [-f SENDER] [-F NAME] [-C CONFIG] [-v] [--] [RECIPIENT]...

The message on standard input, handed to this node's submission port (docs/sendmail.md).
  -t          recipients from To, Cc and Bcc too (Bcc is taken out)
  -i, -oi     a line of one dot does not end the message
  -f, -r      the envelope sender
  -F          the full name of the From added to a message without one
  -C, --config mtad's configuration file
  -v          the SMTP dialogue on standard error
Exit status: 0 spooled, 64 usage, 65 message refused, 67 recipient refused,
75 try again (daemon down, 4xx), 77 AUTH refused, 78 configuration."""


@dataclass(slots=True)
class Invocation:
    """What the command line asks for."""

    recipients: list[str] = field(default_factory=list)
    from_headers: bool = False  # -t
    dot_ends: bool = True  # without -i/-oi a line of one dot ends the message
    sender: str | None = None  # -f, -r; "" is the null sender
    full_name: str | None = None  # -F
    config: Path | None = None  # -C, --config
    verbose: bool = False  # -v


@dataclass(frozen=True, slots=True)
class Outcome:
    """The exit status, and what stderr is told (None: nothing)."""

    status: int
    said: str | None = None


@dataclass(frozen=True, slots=True)
class Settings:
    """Where it submits, how it logs in, the domain of a sender it makes up."""

    submit_to: HostPort
    login: str | None
    password: str | None
    hostname: str  # the domain of a sender it makes up: [sendmail] domain, else [submission] hostname


def settings(path: Path | None) -> Settings:
    """[sendmail] and the [submission] keys it needs (no file: the defaults);
    ConfigError lists every problem."""
    from mtad import config
    from mtad.base import errors
    from mtad.base.endpoints import HostPort

    own, found = config.load_section(path, "sendmail", also=(("submission", "listen"), ("submission", "hostname")))
    password = None
    if own.login is not None:
        if own.password_file is None:
            raise errors.ConfigError(["[sendmail] password_file: login is set, and its password is read from it"])
        try:
            password = own.password_file.read_text().strip("\r\n")
        except OSError as exc:
            raise errors.ConfigError(
                [f"[sendmail] password_file: cannot read {own.password_file}: {exc.strerror or exc}"]
            ) from None
    listen = found["submission"]["listen"][0]
    wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # listening everywhere: here on loopback
    target = own.submit_to or HostPort(wildcard.get(listen.host, listen.host), listen.port)
    return Settings(target, own.login, password, own.domain or found["submission"]["hostname"])


def parse(argv: Sequence[str]) -> Invocation:
    """The command line (without the program's name); UsageError for a bad one."""
    got = Invocation()
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg == "--":
            got.recipients += args
            break
        if arg.startswith("--config"):
            value = arg.partition("=")[2] or (args.pop(0) if args else "")
            if not value:
                raise UsageError("--config needs a path")
            got.config = Path(value)
            continue
        if not arg.startswith("-") or arg == "-":
            got.recipients.append(arg)
            continue
        letter, rest = arg[1], arg[2:]
        if letter == "o":  # -oi and the other -oX options
            if rest in ("i", "i=true", "i=True"):
                got.dot_ends = False
            continue
        if letter == "b":
            if rest not in _MODES:
                raise UsageError(f"{arg}: unknown mode")
            why = _MODES[rest]
            if why is not None:
                raise UsageError(f"{arg} is not supported: {why}")
            continue
        if letter in _VALUED:
            given = rest if rest else (args.pop(0) if args else None)
            if given is None:
                raise UsageError(f"-{letter} needs a value")
            if letter in "fr":
                got.sender = given.strip().strip("<>")
            elif letter == "F":
                got.full_name = given
            elif letter == "C":
                got.config = Path(given)
            continue
        for flag in arg[1:]:  # flags may run together: -ti
            if flag == "t":
                got.from_headers = True
            elif flag == "i":
                got.dot_ends = False
            elif flag == "v":
                got.verbose = True
            elif flag not in _IGNORED:
                raise UsageError(f"-{flag}: unknown option")
    return got


def read(stream: BinaryIO, *, dot_ends: bool) -> bytes:
    """The message on `stream`, lines ended CRLF; without -i up to a line of one dot."""
    raw = stream.read()
    lines = _LINE_END.split(raw)
    if lines and lines[-1] == b"":
        lines.pop()
    if dot_ends and b"." in lines:
        lines = lines[: lines.index(b".")]
    return b"".join(line + b"\r\n" for line in lines)


def prepare(message: bytes, got: Invocation, hostname: str) -> tuple[str, list[str], bytes]:
    """(envelope sender, recipients, message as sent): with -t the recipients of To,
    Cc and Bcc added and Bcc taken out; a From added when there is none."""
    head, blank, body = message.partition(b"\r\n\r\n")
    if not blank and _FIELD_START.match(head) is None:  # no header at all: all of it is the body
        head, body = b"", message
    fields = _fields(head)
    sender = got.sender if got.sender is not None else f"{getpass.getuser()}@{hostname}"
    recipients = list(got.recipients)
    if got.from_headers:
        named = [_text(raw) for name, raw in fields if name in ("to", "cc", "bcc")]
        recipients += [address for _, address in getaddresses(named) if address]
        fields = [(name, raw) for name, raw in fields if name != "bcc"]
    if not any(name == "from" for name, _ in fields):
        author = formataddr((got.full_name or "", sender or f"MAILER-DAEMON@{hostname}"))
        fields.insert(0, ("from", f"From: {author}\r\n".encode()))
    unique: dict[str, str] = {}  # each recipient once, in the order given
    for recipient in recipients:
        unique.setdefault(recipient.lower(), recipient)
    return sender, list(unique.values()), b"".join(raw for _, raw in fields) + b"\r\n" + body


def submit(settings: Settings, sender: str, recipients: list[str], message: bytes, *, verbose: bool) -> Outcome:
    """The message handed to the port; what came of it."""
    where = str(settings.submit_to)
    try:
        with smtplib.SMTP(timeout=TIMEOUT) as smtp:
            smtp.set_debuglevel(1 if verbose else 0)
            code, text = smtp.connect(settings.submit_to.host, settings.submit_to.port)
            if code != 220:
                return _refused(f"{where} greeted", code, text)
            smtp.ehlo_or_helo_if_needed()
            if settings.login is not None:
                if smtp.has_extn("starttls"):
                    smtp.starttls(context=_tls(settings.submit_to.host))
                    smtp.ehlo()
                smtp.login(settings.login, settings.password or "")
            options = _mail_options(smtp, sender, recipients, message)
            code, text = smtp.mail(sender, options)
            if code != 250:
                return _refused(f"MAIL FROM:<{sender}>", code, text)
            for recipient in recipients:
                code, text = smtp.rcpt(recipient)
                if code not in (250, 251):
                    smtp.rset()
                    return _refused(f"RCPT TO:<{recipient}>", code, text, permanent=EX_NOUSER)
            code, text = smtp.data(message)
            if code != 250:
                return _refused("the message", code, text)
    except smtplib.SMTPAuthenticationError as exc:
        return _refused(f"AUTH as {settings.login}", exc.smtp_code, exc.smtp_error, permanent=EX_NOPERM)
    except smtplib.SMTPResponseException as exc:
        return _refused(where, exc.smtp_code, exc.smtp_error)
    except smtplib.SMTPNotSupportedError as exc:
        return Outcome(EX_CONFIG, f"{where}: {exc} ([sendmail] login is set, but the port offers no AUTH)")
    except (smtplib.SMTPException, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        return Outcome(EX_TEMPFAIL, f"cannot submit to {where}: {why} (is `mtad run` running?)")
    return Outcome(EX_OK)


def main(argv: Sequence[str], stdin: BinaryIO, program: str = "mtad-sendmail") -> int:
    """The whole command: parse, read, submit; the exit status, what failed said on stderr."""
    from mtad import config
    from mtad.base.errors import ConfigError

    if "--help" in argv:
        print(USAGE)
        return EX_OK
    try:
        got = parse(argv)
    except UsageError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return EX_USAGE
    try:
        chosen = settings(got.config or config.default_path())
    except ConfigError as exc:
        for problem in exc.problems:
            print(f"{program}: {problem}", file=sys.stderr)
        return EX_CONFIG
    sender, recipients, message = prepare(read(stdin, dot_ends=got.dot_ends), got, chosen.hostname)
    if not recipients:
        print(f"{program}: no recipients: give them as arguments, or -t to read To, Cc and Bcc", file=sys.stderr)
        return EX_USAGE
    outcome = submit(chosen, sender, recipients, message, verbose=got.verbose)
    if outcome.said is not None:
        made_up = got.sender is None and outcome.said.startswith("MAIL FROM:")
        hint = " (a sender made up for want of -f: give -f ADDRESS, or set [sendmail] domain)" if made_up else ""
        print(f"{program}: {outcome.said}{hint}", file=sys.stderr)
    return outcome.status


def entry_point() -> None:
    """The console script `mtad-sendmail` (symlinked as /usr/sbin/sendmail)."""
    sys.exit(main(sys.argv[1:], sys.stdin.buffer))


# --- the parts ----------------------------------------------------------------------


def _refused(what: str, code: int, text: bytes | str, *, permanent: int = EX_DATAERR) -> Outcome:
    """A reply other than the one hoped for: 4xx try again, 5xx `permanent`."""
    said = text.decode(errors="replace") if isinstance(text, bytes) else text
    status = EX_TEMPFAIL if 400 <= code < 500 or code < 200 else permanent
    return Outcome(status, f"{what}: {code} {' '.join(said.split())}")


def _mail_options(smtp: smtplib.SMTP, sender: str, recipients: list[str], message: bytes) -> list[str]:
    """SMTPUTF8 for addresses beyond ASCII, BODY=8BITMIME for 8-bit text, when offered."""
    options = []
    if not all(a.isascii() for a in [sender, *recipients]) and smtp.has_extn("smtputf8"):
        options.append("SMTPUTF8")
    if not message.isascii() and smtp.has_extn("8bitmime"):
        options.append("BODY=8BITMIME")
    return options


def _tls(host: str) -> ssl.SSLContext:
    """STARTTLS to the node: verified, but for a loopback address (nothing lies between)."""
    context = ssl.create_default_context()
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if loopback:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


_FIELD_START = re.compile(rb"[!-9;-~]+:")  # a field name (printable ASCII but the colon) and its colon


def _fields(head: bytes) -> list[tuple[str, bytes]]:
    """The header block's fields: each one's lower-case name, and its lines as they are."""
    found: list[tuple[str, bytes]] = []
    for line in head.split(b"\r\n"):
        if line[:1] in (b" ", b"\t") and found:
            found[-1] = (found[-1][0], found[-1][1] + line + b"\r\n")
        elif line:
            name = line.partition(b":")[0].strip().decode("ascii", errors="replace").lower()
            found.append((name, line + b"\r\n"))
    return found


def _text(raw: bytes) -> str:
    """A field's text, unfolded."""
    return " ".join(raw.decode("utf-8", errors="replace").partition(":")[2].split())
