"""`mtad sink`: a development SMTP server that accepts every message and says so.

It prints one line per message on stdout (time, sender, recipients, size,
Subject, Message-ID, and the d= and s= of each DKIM-Signature), stores each
message as a .eml file with `--dir`, and answers RCPT as scripted by recipient
glob, like Postfix's smtp-sink: `--reply 'bounce*@*=550 5.1.1 No such user'`;
recipients no glob matches are deferred or bounced at chosen rates (one seeded
draw per RCPT), and each end of DATA answered after a chosen delay. STARTTLS and
AUTH when asked. It needs no configuration file and no database; SIGINT or
SIGTERM stop it, and it prints a summary of what it answered.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import fnmatch
import io
import json
import os
import random
import re
import signal
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from mtad.base import errors, values
from mtad.base.endpoints import HostPort
from mtad.base.replies import Reply
from mtad.base.sessions_set import Tracked

DEFAULT_LISTEN = "127.0.0.1:2526"
ACCEPTED = Reply(250, "2.1.5", "OK")
RECEIVED = Reply(250, "2.0.0", "OK: received by mtad sink")
NOT_STORED = Reply(451, "4.3.0", "mtad sink could not store the message")
DEFERRED = Reply(451, "4.3.0", "Try again later (mtad sink --defer)")
BOUNCED = Reply(550, "5.1.1", "No such user (mtad sink --bounce)")
SENDER_OK = Reply(250, "2.1.0", "OK")
AUTH_REQUIRED = Reply(530, "5.7.0", "Authentication required")
# The text of a scripted reply that gives none, by class.
_DEFAULT_TEXT = {2: "OK", 4: "Try again later", 5: "Refused"}
_REPLY_START = re.compile(r"=(?=\d{3}(?: |$))")  # the = of PATTERN=REPLY
_CODE = re.compile(r"[245][0-5]\d")
_ENHANCED = re.compile(r"[245]\.\d{1,3}\.\d{1,3}")
_HEADERS = email.parser.HeaderParser(policy=email.policy.default)
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)%")


@dataclass(frozen=True, slots=True)
class Rule:
    """Recipients matching `pattern` (an fnmatch glob, lower case) get `reply` at RCPT."""

    pattern: str
    reply: Reply

    def matches(self, recipient: str) -> bool:
        return fnmatch.fnmatchcase(recipient.lower(), self.pattern)


@dataclass(frozen=True, slots=True)
class Chances:
    """What a recipient no rule matches gets: one draw u in [0, 1) per RCPT, deferred
    below `defer`, bounced below defer + bounce, else accepted; the end of DATA is
    answered after a delay drawn from [low, high] seconds."""

    defer: float = 0.0
    bounce: float = 0.0
    delay: tuple[float, float] = (0.0, 0.0)

    def reply(self, draw: random.Random) -> Reply:
        if not (self.defer or self.bounce):
            return ACCEPTED
        u = draw.random()
        return DEFERRED if u < self.defer else BOUNCED if u < self.defer + self.bounce else ACCEPTED

    def wait(self, draw: random.Random) -> float:
        low, high = self.delay
        return low if low == high else draw.uniform(low, high)


@dataclass(frozen=True, slots=True)
class Login:
    """The AUTH PLAIN/LOGIN the sink takes: any user and password, or only this pair."""

    user: str | None = None
    password: str = ""

    def allows(self, given: LoginPassword) -> bool:
        return self.user is None or (given.login, given.password) == (self.user.encode(), self.password.encode())


@dataclass(frozen=True, slots=True)
class Tls:
    """STARTTLS with this certificate and key, or a self-signed pair made at start (None)."""

    cert: Path | None = None
    key: Path | None = None


@dataclass(frozen=True, slots=True)
class Options:
    listen: HostPort
    rules: tuple[Rule, ...] = ()
    directory: Path | None = None  # None: messages are printed, not stored
    chances: Chances = field(default_factory=Chances)
    tls: Tls | None = None
    login: Login | None = None  # None: no AUTH; else MAIL needs it
    seed: int | None = None  # None: a random seed, said at start
    quiet: bool = False  # no line per message, the summary only


def options(
    listen: str,
    rules: Sequence[str],
    directory: Path | None,
    *,
    defer: str | None = None,
    bounce: str | None = None,
    delay: str | None = None,
    tls: bool = False,
    cert: Path | None = None,
    key: Path | None = None,
    auth: str | None = None,
    seed: int | None = None,
    quiet: bool = False,
) -> Options:
    """The command line's values as Options (auth: "" for any login, else USER:PASSWORD);
    ConfigError names the option of each problem. Sync, no I/O."""
    problems: list[str] = []

    def parsed(option: str, parse: Any, text: str | None, default: Any) -> Any:
        try:
            return default if text is None else parse(text)
        except ValueError as exc:
            problems.append(f"{option}: {exc}")
            return default

    address = parsed("--listen", values.host_port, listen, None)
    made = [rule for text in rules if (rule := parsed(f"--reply {text!r}", parse_rule, text, None))]
    chances = Chances(parsed("--defer", percent, defer, 0.0), parsed("--bounce", percent, bounce, 0.0),
                      parsed("--delay", delay_range, delay, (0.0, 0.0)))  # fmt: skip
    if chances.defer + chances.bounce > 1:
        problems.append("--defer and --bounce: together more than 100%")
    if (cert is None) != (key is None):
        problems.append("--cert and --key: give both, or neither for a self-signed certificate")
    login = parsed("--auth", parse_login, auth, None)
    if problems:
        raise errors.ConfigError(problems)
    secure = Tls(cert, key) if tls or cert is not None else None
    return Options(address, tuple(made), directory, chances, secure, login, seed, quiet)


def percent(text: str) -> float:
    """ "5%" or "0.5%" as a fraction. ValueError says what is wrong. Sync."""
    match = _PERCENT.fullmatch(text.strip())
    if match is None or float(match.group(1)) > 100:
        raise ValueError(f"expected a percentage from 0% to 100%, such as 5% or 0.5%, got {text!r}")
    return float(match.group(1)) / 100


def delay_range(text: str) -> tuple[float, float]:
    """ "200ms", or "100ms-300ms" for a delay drawn evenly from that range. Sync."""
    low, dash, high = text.partition("-")
    pair = (values.duration(low), values.duration(high)) if dash else (values.duration(text),) * 2
    if pair[0] > pair[1]:
        raise ValueError(f"the range {text!r} ends before it starts")
    return pair


def parse_login(text: str) -> Login:
    """ "" for any login, USER:PASSWORD for that one. Sync."""
    if not text:
        return Login()
    user, colon, password = text.partition(":")
    if not (user and colon and password):
        raise ValueError("expected USER:PASSWORD, or nothing to take any login")
    return Login(user, password)


def parse_rule(text: str) -> Rule:
    """PATTERN=REPLY, such as "bounce*@*=550 5.1.1 No such user" (the pattern may hold
    an = not followed by a reply code). ValueError says what is wrong. Sync, no I/O."""
    split = _REPLY_START.search(text)
    if split is None or split.start() == 0:
        raise ValueError("expected PATTERN=REPLY, such as 'bounce*@*=550 5.1.1 No such user'")
    return Rule(text[: split.start()].lower(), parse_reply(text[split.end() :]))


def parse_reply(text: str) -> Reply:
    """CODE [ENHANCED] [TEXT]: a 2xx, 4xx or 5xx code, an optional enhanced code of the
    same class, printable ASCII text. ValueError says what is wrong. Sync, no I/O."""
    code, _, rest = text.partition(" ")
    if not _CODE.fullmatch(code):
        raise ValueError(f"reply code {code!r}: expected 2xx, 4xx or 5xx")
    enhanced, _, words = rest.partition(" ")
    if not re.match(r"\d+\.", enhanced):  # no enhanced code: the rest is text
        enhanced, words = "", rest
    elif not _ENHANCED.fullmatch(enhanced) or enhanced[0] != code[0]:
        raise ValueError(f"enhanced code {enhanced!r}: expected {code[0]}.x.y to go with {code}")
    if not (words.isascii() and words.isprintable()):
        raise ValueError("the reply text must be printable ASCII")
    return Reply(int(code), enhanced, words or _DEFAULT_TEXT[int(code[0])])


def scripted(recipient: str, rules: Sequence[Rule]) -> Reply | None:
    """The reply of the first rule that matches the recipient, else None. Sync."""
    return next((rule.reply for rule in rules if rule.matches(recipient)), None)


def reply_for(recipient: str, rules: Sequence[Rule]) -> Reply:
    """The reply of the first rule that matches the recipient, else 250. Sync."""
    return scripted(recipient, rules) or ACCEPTED


def describe(sender: str, recipients: Sequence[str], data: bytes, at: datetime, stored: Path | None) -> str:
    """The line printed for a message. Sync, no I/O."""
    head = _HEADERS.parsestr(data.partition(b"\r\n\r\n")[0].decode("utf-8", "replace"))
    subject = " ".join(str(head.get("Subject", "")).split())
    message_id = " ".join(str(head.get("Message-ID", "")).split()) or "-"
    fields = [
        at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        f"from={_path(sender)}",
        "to=" + ",".join(map(_path, recipients)),
        f"size={len(data)}",
        f"subject={json.dumps(subject, ensure_ascii=False)}",
        f"message-id={message_id}",
    ]
    signatures = [_tags(str(value)) for value in head.get_all("DKIM-Signature", [])]
    fields += [f'dkim="d={tags.get("d", "?")} s={tags.get("s", "?")}"' for tags in signatures] or ["dkim=none"]
    if stored is not None:
        fields.append(f"file={stored}")
    return " ".join(fields)


def _path(address: str) -> str:
    return address if address == "<>" else f"<{address}>"  # aiosmtpd gives the null path as "<>"


def _tags(value: str) -> dict[str, str]:
    """The tags of a DKIM-Signature value (folding whitespace removed)."""
    pairs = (tag.partition("=") for tag in "".join(value.split()).split(";"))
    return {name: tag for name, _, tag in pairs if name}


def store(directory: Path, data: bytes, at: datetime, number: int) -> Path:
    """Write the message as it arrived to DIR/<UTC time>-<number>.eml, names that sort by
    arrival; the file appears whole (written under a dot name, then renamed)."""
    path = directory / f"{at:%Y%m%dT%H%M%S.%f}Z-{number:06d}.eml"
    partial = directory / f".{path.name}.part"
    partial.write_bytes(data)
    os.replace(partial, path)
    return path


@dataclass(slots=True)
class Tally:
    """What the sink answered, for its summary on exit."""

    messages: int = 0  # ends of DATA answered 250
    octets: int = 0
    accepted: int = 0  # recipients, by the class of their RCPT reply
    deferred: int = 0
    bounced: int = 0
    first: float | None = None  # monotonic time of the first MAIL
    last: float = 0.0  # of the last message received

    def recipient(self, reply: Reply) -> None:
        if reply.is_success:
            self.accepted += 1
        elif reply.is_transient:
            self.deferred += 1
        else:
            self.bounced += 1

    def summary(self) -> str:
        """One line of key=value pairs; the rate is over the time from the first MAIL to
        the last message."""
        seconds = self.last - self.first if self.first is not None and self.messages else 0.0
        rate = f"{self.messages / seconds:.1f}/s" if seconds > 0 else "-"
        recipients = self.accepted + self.deferred + self.bounced
        return (f"mtad sink: summary: messages={self.messages} recipients={recipients} accepted={self.accepted} "
                f"deferred={self.deferred} bounced={self.bounced} bytes={self.octets} seconds={seconds:.3f} "
                f"rate={rate}")  # fmt: skip


class Handler:
    """aiosmtpd hooks: AUTH when asked for, scripted and drawn replies at RCPT; at the
    end of DATA, after the delay drawn, the message stored (with a directory) and its
    line printed. Counts what it answered in `tally`."""

    def __init__(self, chosen: Options, out: TextIO, draw: random.Random) -> None:
        self.rules = chosen.rules
        self.chances = chosen.chances
        self.login = chosen.login
        self.directory = chosen.directory
        self.quiet = chosen.quiet
        self.out = out
        self.draw = draw
        self.received = 0
        self.tally = Tally()

    def authenticate(self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any) -> AuthResult:
        """aiosmtpd's authenticator, for PLAIN and LOGIN."""
        if self.login is not None and isinstance(data, LoginPassword) and self.login.allows(data):
            return AuthResult(success=True, auth_data=data.login)
        return AuthResult(success=False, handled=False)

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, parameters: list[str]
    ) -> str:
        if self.login is not None and not session.authenticated:
            return AUTH_REQUIRED.line()
        if self.tally.first is None:
            self.tally.first = time.monotonic()
        envelope.mail_from = address
        envelope.mail_options.extend(parameters)
        return SENDER_OK.line()

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, parameters: list[str]
    ) -> str:
        reply = scripted(address, self.rules) or self.chances.reply(self.draw)
        self.tally.recipient(reply)
        if reply.is_success:
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(parameters)
        return reply.line()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        data: bytes = envelope.original_content or b""
        wait = self.chances.wait(self.draw)
        if wait > 0:
            await asyncio.sleep(wait)
        at = datetime.now(UTC)
        self.received += 1
        stored = None
        if self.directory is not None:
            try:
                stored = store(self.directory, data, at, self.received)
            except OSError as exc:
                print(f"mtad sink: cannot store a message: {exc}", file=sys.stderr, flush=True)
                return NOT_STORED.line()
        self.tally.messages += 1
        self.tally.octets += len(data)
        self.tally.last = time.monotonic()
        if not self.quiet:
            sender = envelope.mail_from or "<>"
            print(describe(sender, envelope.rcpt_tos, data, at, stored), file=self.out, flush=True)
        return RECEIVED.line()


def self_signed(directory: Path, hostname: str) -> tuple[Path, Path]:
    """A certificate for hostname and localhost, valid for a day, and its key, written
    as PEM into directory."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.now(UTC)
    names = [x509.DNSName(hostname), x509.DNSName("localhost")]
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=1)).add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    private = serialization.PrivateFormat.PKCS8
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, private, serialization.NoEncryption()))
    return cert_path, key_path


def tls_context(tls: Tls, hostname: str) -> ssl.SSLContext:
    """The server's context: the files given, else a self-signed certificate made now.
    Raises OSError (ssl.SSLError included) when the files cannot be read."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    if tls.cert is not None and tls.key is not None:
        context.load_cert_chain(tls.cert, tls.key)
        return context
    with tempfile.TemporaryDirectory(prefix="mtad-sink-") as directory:
        context.load_cert_chain(*self_signed(Path(directory), hostname))
    return context


def script(chosen: Options, seed: int) -> str:
    """What the listening line says of the options besides the address, "" for none."""
    said = []
    if chosen.directory is not None:
        said.append(f"storing messages in {chosen.directory}")
    chances = chosen.chances
    if chances.defer or chances.bounce:
        said.append(f"defer {chances.defer * 100:g}%, bounce {chances.bounce * 100:g}%")
    if chances.delay != (0.0, 0.0):
        low, high = (f"{s * 1000:g}ms" for s in chances.delay)
        said.append(f"delay {low}" if low == high else f"delay {low}-{high}")
    if chosen.tls is not None:
        said.append("STARTTLS" + (" (self-signed)" if chosen.tls.cert is None else ""))
    if chosen.login is not None:
        said.append(f"AUTH as {chosen.login.user}" if chosen.login.user else "AUTH with any login")
    if chances.defer or chances.bounce or chances.delay[0] != chances.delay[1]:
        said.append(f"seed {seed}")
    return "".join(f"; {part}" for part in said)


def run(chosen: Options) -> None:
    """Serve until SIGINT or SIGTERM; raises OSError when it cannot listen, make the
    directory or read the certificate."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")  # a line for every message, whatever the locale
    asyncio.run(serve(chosen))


async def serve(chosen: Options, out: TextIO = sys.stdout) -> None:
    """Accept on chosen.listen until SIGINT or SIGTERM, then cut the open sessions and
    print the summary. Says where it listens first (the port bound, when 0 was asked
    for), and with what script."""
    loop = asyncio.get_running_loop()
    if chosen.directory is not None:
        chosen.directory.mkdir(parents=True, exist_ok=True)
    hostname = socket.gethostname()
    secure = tls_context(chosen.tls, hostname) if chosen.tls is not None else None
    seed = chosen.seed if chosen.seed is not None else random.SystemRandom().randrange(2**32)
    handler = Handler(chosen, out, random.Random(seed))
    sessions: set[Tracked] = set()
    auth: dict[str, Any] = {}
    if chosen.login is not None:  # AUTH over TLS only when the sink offers TLS
        auth = {"authenticator": handler.authenticate, "auth_require_tls": secure is not None}

    def session() -> Tracked:
        return Tracked(handler, sessions, hostname=hostname, ident="mtad sink", enable_SMTPUTF8=True,
                       tls_context=secure, **auth)  # fmt: skip

    server = await loop.create_server(session, chosen.listen.host, chosen.listen.port)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bound = ", ".join(str(HostPort(*s.getsockname()[:2])) for s in server.sockets)
    print(f"mtad sink: listening on {bound}{script(chosen, seed)}", file=out, flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        for open_session in list(sessions):
            if isinstance(open_session.transport, asyncio.Transport):
                open_session.transport.abort()
        await server.wait_closed()
        print(handler.tally.summary(), file=out, flush=True)
