"""`mtad sink`: a development SMTP server that accepts every message and says so.

It prints one line per message on stdout (time, sender, recipients, size,
Subject, Message-ID, and the d= and s= of each DKIM-Signature), stores each
message as a .eml file with `--dir`, and answers RCPT as scripted by recipient
glob, like Postfix's smtp-sink: `--reply 'bounce*@*=550 5.1.1 No such user'`.
It needs no configuration file and no database; SIGINT or SIGTERM stop it.
"""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import fnmatch
import io
import json
import os
import re
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from aiosmtpd.smtp import SMTP, Envelope, Session

from mtad.base import errors, values
from mtad.base.endpoints import HostPort
from mtad.base.replies import Reply
from mtad.base.sessions_set import Tracked

DEFAULT_LISTEN = "127.0.0.1:2526"
ACCEPTED = Reply(250, "2.1.5", "OK")
RECEIVED = Reply(250, "2.0.0", "OK: received by mtad sink")
NOT_STORED = Reply(451, "4.3.0", "mtad sink could not store the message")
# The text of a scripted reply that gives none, by class.
_DEFAULT_TEXT = {2: "OK", 4: "Try again later", 5: "Refused"}
_REPLY_START = re.compile(r"=(?=\d{3}(?: |$))")  # the = of PATTERN=REPLY
_CODE = re.compile(r"[245][0-5]\d")
_ENHANCED = re.compile(r"[245]\.\d{1,3}\.\d{1,3}")
_HEADERS = email.parser.HeaderParser(policy=email.policy.default)


@dataclass(frozen=True, slots=True)
class Rule:
    """Recipients matching `pattern` (an fnmatch glob, lower case) get `reply` at RCPT."""

    pattern: str
    reply: Reply

    def matches(self, recipient: str) -> bool:
        return fnmatch.fnmatchcase(recipient.lower(), self.pattern)


@dataclass(frozen=True, slots=True)
class Options:
    listen: HostPort
    rules: tuple[Rule, ...] = ()
    directory: Path | None = None  # None: messages are printed, not stored


def options(listen: str, rules: Sequence[str], directory: Path | None) -> Options:
    """The command line's values as Options; ConfigError names the option of each
    problem. Sync, no I/O."""
    problems: list[str] = []
    try:
        address = values.host_port(listen)
    except ValueError as exc:
        problems.append(f"--listen: {exc}")
    parsed = []
    for text in rules:
        try:
            parsed.append(parse_rule(text))
        except ValueError as exc:
            problems.append(f"--reply {text!r}: {exc}")
    if problems:
        raise errors.ConfigError(problems)
    return Options(address, tuple(parsed), directory)


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


def reply_for(recipient: str, rules: Sequence[Rule]) -> Reply:
    """The reply of the first rule that matches the recipient, else 250. Sync."""
    return next((rule.reply for rule in rules if rule.matches(recipient)), ACCEPTED)


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


class Handler:
    """aiosmtpd hooks: scripted replies at RCPT; at the end of DATA, the message stored
    (with a directory) and its line printed."""

    def __init__(self, rules: Sequence[Rule], directory: Path | None, out: TextIO) -> None:
        self.rules = tuple(rules)
        self.directory = directory
        self.out = out
        self.received = 0

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, parameters: list[str]
    ) -> str:
        reply = reply_for(address, self.rules)
        if reply.is_success:
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(parameters)
        return reply.line()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        data: bytes = envelope.original_content or b""
        at = datetime.now(UTC)
        self.received += 1
        stored = None
        if self.directory is not None:
            try:
                stored = store(self.directory, data, at, self.received)
            except OSError as exc:
                print(f"mtad sink: cannot store a message: {exc}", file=sys.stderr, flush=True)
                return NOT_STORED.line()
        sender = envelope.mail_from or "<>"
        print(describe(sender, envelope.rcpt_tos, data, at, stored), file=self.out, flush=True)
        return RECEIVED.line()


def run(chosen: Options) -> None:
    """Serve until SIGINT or SIGTERM; raises OSError when it cannot listen or make the
    directory."""
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")  # a line for every message, whatever the locale
    asyncio.run(serve(chosen))


async def serve(chosen: Options, out: TextIO = sys.stdout) -> None:
    """Accept on chosen.listen until SIGINT or SIGTERM, then cut the open sessions.
    Says where it listens first (the port bound, when 0 was asked for)."""
    loop = asyncio.get_running_loop()
    if chosen.directory is not None:
        chosen.directory.mkdir(parents=True, exist_ok=True)
    handler = Handler(chosen.rules, chosen.directory, out)
    sessions: set[Tracked] = set()
    hostname = socket.gethostname()

    def session() -> Tracked:
        return Tracked(handler, sessions, hostname=hostname, ident="mtad sink", enable_SMTPUTF8=True)

    server = await loop.create_server(session, chosen.listen.host, chosen.listen.port)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    bound = ", ".join(str(HostPort(*s.getsockname()[:2])) for s in server.sockets)
    where = f"; storing messages in {chosen.directory}" if chosen.directory is not None else ""
    print(f"mtad sink: listening on {bound}{where}", file=out, flush=True)
    try:
        await stop.wait()
    finally:
        server.close()
        for open_session in list(sessions):
            if isinstance(open_session.transport, asyncio.Transport):
                open_session.transport.abort()
        await server.wait_closed()
