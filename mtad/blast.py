"""`mtad blast`: a traffic generator. N messages over M SMTP connections to any
host:port, at a target rate or as fast as the server answers; sizes, recipients per
message, domains; STARTTLS and AUTH when asked.

Message i is due at start + i / rate (a token schedule: a connection that falls
behind sends its next message at once, and nothing drifts); a message's latency is
the time from writing MAIL to reading the reply that settles it (the end of DATA's,
or the refusal that ends it); a message's end-of-DATA latency, from handing the
final dot to the socket to reading its reply, is counted apart (the server's
accept: what a client that does not pipeline also waits for). Commands are
pipelined when the server offers PIPELINING. Progress goes to stderr about every second, the summary to stdout.
Needs no configuration and no database.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import random
import re
import signal
import ssl
import sys
import time
import uuid
from array import array
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any, TextIO

from mtad.base import errors, values
from mtad.base.endpoints import HostPort
from mtad.base.replies import Reply

DEFAULT_DOMAINS = ("sink.test",)  # the quick start's route to `mtad sink`
DEFAULT_SENDER = "blast@example.org"
HELO = "blast.mtad.test"
_RATE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:/\s*(s|sec|m|min|h))?")
_PER = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_ENHANCED = re.compile(r"([245]\.\d{1,3}\.\d{1,3}) ")
_LINE = b"The quick brown fox jumps over the lazy dog; mtad blast fills the body so. 0123\r\n"  # 78 octets


class SessionLost(errors.RemoteError):
    """A connection of blast's that cannot go on: it could not be made, was lost, timed
    out, or EHLO, STARTTLS or AUTH was refused. The message names what happened."""


@dataclass(frozen=True, slots=True)
class Options:
    target: HostPort
    messages: int
    connections: int = 1
    rate: float | None = None  # messages per second; None: as fast as the server answers
    size: tuple[int, int] = (1024, 1024)  # octets of each message, drawn evenly from the range
    recipients: int = 1
    domains: tuple[str, ...] = DEFAULT_DOMAINS
    sender: str = DEFAULT_SENDER
    starttls: bool = False
    insecure: bool = False  # STARTTLS without checking the certificate
    login: tuple[str, str] | None = None  # AUTH PLAIN (else LOGIN) as (user, password)
    timeout: float = 60.0  # for each reply
    seed: int = 0
    every: float = 1.0  # seconds between two progress lines


def options(
    target: str,
    *,
    messages: int,
    connections: int = 1,
    rate: str | None = None,
    size: str = "1KiB",
    recipients: int = 1,
    domains: str | None = None,
    sender: str = DEFAULT_SENDER,
    starttls: bool = False,
    insecure: bool = False,
    login: tuple[str, str] | None = None,
    timeout: str = "60s",
    seed: int = 0,
) -> Options:
    """The command line's values as Options; UsageError names the option of every
    problem at once. Sync, no I/O."""
    problems: list[str] = []

    def parsed(option: str, parse: Any, text: Any, default: Any) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            problems.append(f"{option}: {exc}")
            return default

    address = parsed("HOST:PORT", values.host_port, target, None)
    if address is not None and address.port == 0:
        problems.append("HOST:PORT: port 0 is no server's")
    for option, count in (("--messages", messages), ("--connections", connections), ("--recipients", recipients)):
        if count < 1:
            problems.append(f"{option}: must be at least 1, got {count}")
    per_second = parsed("--rate", parse_rate, rate, None) if rate is not None else None
    sizes = parsed("--size", size_range, size, (1024, 1024))
    names = parsed("--domains", parse_domains, domains, DEFAULT_DOMAINS) if domains is not None else DEFAULT_DOMAINS
    if sender.count("@") != 1 or not all(sender.split("@")) or not sender.isprintable() or " " in sender:
        problems.append(f"--from: expected an address such as {DEFAULT_SENDER}, got {sender!r}")
    if insecure and not starttls:
        problems.append("--insecure: only with --starttls")
    wait = parsed("--timeout", values.positive_duration, timeout, 60.0)
    if problems:
        raise errors.UsageError("; ".join(problems))
    return Options(address, messages, connections, per_second, sizes, recipients, names, sender, starttls, insecure,
                   login, wait, seed)  # fmt: skip


def parse_rate(text: str) -> float:
    """ "500", "500/s", "3000/min" or "36000/h" as messages per second. Sync."""
    match = _RATE.fullmatch(text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"expected a rate above zero such as 500/s or 3000/min, got {text!r}")
    return float(match.group(1)) / _PER[match.group(2)]


def size_range(text: str) -> tuple[int, int]:
    """ "10KiB", or "1KiB-100KiB" for sizes drawn evenly from that range. Sync."""
    low, dash, high = text.partition("-")
    pair = (values.size(low), values.size(high)) if dash else (values.size(text),) * 2
    if pair[0] > pair[1]:
        raise ValueError(f"the range {text!r} ends before it starts")
    if pair[1] > 64 * 2**20:
        raise ValueError("at most 64MiB")
    return pair


def parse_domains(text: str) -> tuple[str, ...]:
    """ "a.test,b.test": the recipients' domains, taken in turn. Sync."""
    names = tuple(name.strip().lower() for name in text.split(","))
    for name in names:
        if not values.HOSTNAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a domain name")
    return names


# --- what is sent, and when ------------------------------------------------------------


class Corpus:
    """The messages: message i goes to `recipients` addresses taken in turn from the
    domains, with a size drawn from the range (seeded). Sync, no I/O."""

    def __init__(self, chosen: Options) -> None:
        self.chosen = chosen
        self.run = uuid.uuid4().hex[:12]
        self._draw = random.Random(chosen.seed)
        lines = chosen.size[1] // len(_LINE) + 2
        self._filler = _LINE * lines

    def envelope(self, index: int) -> list[str]:
        k, domains = self.chosen.recipients, self.chosen.domains
        return [f"blast-{index}-{j}@{domains[(index * k + j) % len(domains)]}" for j in range(k)]

    def message(self, index: int, recipients: Sequence[str]) -> bytes:
        """The message as DATA sends it, without the final dot: no line starts with a
        dot, so nothing needs stuffing."""
        low, high = self.chosen.size
        size = low if low == high else self._draw.randint(low, high)
        head = (f"From: <{self.chosen.sender}>\r\nTo: <{recipients[0]}>\r\nSubject: mtad blast {self.run} {index}\r\n"
                f"Date: {formatdate()}\r\nMessage-ID: <{self.run}.{index}@{HELO}>\r\nMIME-Version: 1.0\r\n"
                "Content-Type: text/plain; charset=us-ascii\r\n\r\n").encode()  # fmt: skip
        whole, rest = divmod(max(size - len(head), 2), len(_LINE))
        if rest == 1 and whole:  # no 1-octet line: the last one is made one longer
            whole, rest = whole - 1, rest + len(_LINE)
        tail = b"z" * (rest - 2) + b"\r\n" if rest >= 2 else b""
        return head + self._filler[: whole * len(_LINE)] + tail


class Schedule:
    """Which message is next and when it is due; stop() takes no more. Sync."""

    def __init__(self, total: int, rate: float | None) -> None:
        self.total = total
        self.rate = rate
        self.taken = 0
        self.start = time.monotonic()
        self.stopped = asyncio.Event()

    def take(self) -> tuple[int, float] | None:
        if self.taken >= self.total or self.stopped.is_set():
            return None
        index = self.taken
        self.taken += 1
        return index, (self.start + index / self.rate if self.rate else 0.0)

    def stop(self) -> None:
        self.stopped.set()

    async def wait_until(self, due: float) -> bool:
        """Until the time is due; False when stop() came first."""
        delay = due - time.monotonic()
        if delay > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self.stopped.wait()
        return not self.stopped.is_set()


# --- what came back -----------------------------------------------------------------


def percentile(ordered: Sequence[float], p: float) -> float:
    """The nearest-rank p-th percentile (0 < p <= 1) of sorted values; 0 for none."""
    return ordered[max(math.ceil(p * len(ordered)) - 1, 0)] if ordered else 0.0


def latencies(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99 and max in milliseconds. Sync; sorts a copy."""
    ordered = sorted(seconds)
    marks = {"p50": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
    return {name: round(percentile(ordered, p) * 1000, 3) for name, p in marks.items()}


def reply_key(reply: Reply) -> str:
    return f"{reply.code} {reply.enhanced}" if reply.enhanced else str(reply.code)


@dataclass
class Tally:
    """What the run did so far. Sync."""

    chosen: Options
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    accepted: int = 0  # messages, by how they were settled
    deferred: int = 0
    refused: int = 0
    failed: int = 0  # no reply: the connection was lost, or a reply timed out
    replies: Counter[str] = field(default_factory=Counter)  # the reply that settled each message
    recipients: Counter[str] = field(default_factory=Counter)  # accepted, deferred, refused
    failures: Counter[str] = field(default_factory=Counter)  # why, for messages and connections
    seconds: array[float] = field(default_factory=lambda: array("d"))
    data_seconds: array[float] = field(default_factory=lambda: array("d"))  # end of DATA to its reply
    window: list[float] = field(default_factory=list)  # latencies since the last progress line

    @property
    def settled(self) -> int:
        return self.accepted + self.deferred + self.refused + self.failed

    @property
    def clean(self) -> bool:
        """Every message sent and accepted for every recipient."""
        return self.accepted == self.chosen.messages and set(self.recipients) <= {"accepted"}

    def settle(self, reply: Reply, seconds: float) -> None:
        self.replies[reply_key(reply)] += 1
        if reply.is_success:
            self.accepted += 1
        elif reply.is_transient:
            self.deferred += 1
        else:
            self.refused += 1
        self.seconds.append(seconds)
        self.window.append(seconds)

    def recipient(self, reply: Reply) -> None:
        self.recipients["accepted" if reply.is_success else "deferred" if reply.is_transient else "refused"] += 1

    def fail(self, why: str, messages: int = 1) -> None:
        self.failed += messages
        self.failures[why] += 1

    def elapsed(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started

    def progress(self, last: tuple[float, int]) -> str:
        """A progress line; `last` is (elapsed, settled) at the previous one."""
        now, settled = self.elapsed(), self.settled
        rate = (settled - last[1]) / max(now - last[0], 1e-9)
        marks = latencies(self.window)
        self.window.clear()
        return (f"mtad blast: {now:7.1f} s  {settled}/{self.chosen.messages}  {rate:8.1f}/s  latency ms "
                f"p50 {marks['p50']:.1f} p90 {marks['p90']:.1f} p99 {marks['p99']:.1f} max {marks['max']:.1f}  "
                f"deferred {self.deferred} refused {self.refused} failed {self.failed}")  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """The final summary as JSON-able values."""
        seconds = self.elapsed()
        classes: Counter[str] = Counter()
        for key, n in self.replies.items():
            classes[f"{key[0]}xx"] += n
        return {
            "target": str(self.chosen.target),
            "messages": self.chosen.messages,
            "connections": self.chosen.connections,
            "seconds": round(seconds, 3),
            "rate": round(self.settled / seconds, 1) if seconds > 0 else 0.0,
            "target_rate": self.chosen.rate,
            "accepted": self.accepted,
            "deferred": self.deferred,
            "refused": self.refused,
            "failed": self.failed,
            "not_sent": self.chosen.messages - self.settled,
            "classes": dict(sorted(classes.items())),
            "replies": dict(sorted(self.replies.items())),
            "recipients": {k: self.recipients[k] for k in ("accepted", "deferred", "refused")},
            "failures": dict(sorted(self.failures.items())),
            "latency_ms": {"count": len(self.seconds), **latencies(self.seconds)},
            "data_latency_ms": {"count": len(self.data_seconds), **latencies(self.data_seconds)},
        }


def summary_text(summary: dict[str, Any]) -> str:
    """The final summary as an operator reads it."""
    target = f" (target {summary['target_rate']:g}/s)" if summary["target_rate"] else ""
    replies = "; ".join(f"{key}: {n}" for key, n in summary["replies"].items()) or "none"
    failures = "; ".join(f"{why}: {n}" for why, n in summary["failures"].items())
    people = summary["recipients"]
    marks, data = summary["latency_ms"], summary["data_latency_ms"]
    lines = [
        f"mtad blast: {summary['messages']} messages to {summary['target']} over {summary['connections']} "
        f"connection(s) in {summary['seconds']:.2f} s: {summary['rate']:.1f}/s{target}",
        f"messages:   {summary['accepted']} accepted, {summary['deferred']} deferred, {summary['refused']} refused, "
        f"{summary['failed']} failed, {summary['not_sent']} not sent",
        f"recipients: {people['accepted']} accepted, {people['deferred']} deferred, {people['refused']} refused",
        f"replies:    {replies}",
        f"latency:    p50 {marks['p50']:.2f} ms, p90 {marks['p90']:.2f} ms, p99 {marks['p99']:.2f} ms, "
        f"max {marks['max']:.2f} ms (MAIL to the reply that settles it, {marks['count']} messages)",
        f"            p50 {data['p50']:.2f} ms, p90 {data['p90']:.2f} ms, p99 {data['p99']:.2f} ms, "
        f"max {data['max']:.2f} ms (end of DATA to its reply, {data['count']} messages)",
    ]
    return "\n".join(lines + ([f"failures:   {failures}"] if failures else []))


# --- the SMTP client ----------------------------------------------------------------


class Session:
    """One SMTP connection over asyncio streams. Every foreign failure (OSError, ssl,
    a timeout, a reply that is not SMTP) is raised as SessionLost. Hand-written: a load
    client wants every command pipelined and little CPU per message, which aiosmtplib
    (one command at a time, mtad's pipelining leans on its internals) does not give."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, timeout: float) -> None:
        self.reader, self.writer, self.timeout = reader, writer, timeout
        self.extensions: dict[str, str] = {}

    @classmethod
    async def open(cls, chosen: Options, context: ssl.SSLContext | None) -> Session:
        """Connected, greeted, EHLO said; STARTTLS and AUTH done when chosen."""
        try:
            async with asyncio.timeout(chosen.timeout):
                reader, writer = await asyncio.open_connection(chosen.target.host, chosen.target.port)
        except TimeoutError:
            raise SessionLost("cannot connect: timeout") from None
        except OSError as exc:
            raise SessionLost(f"cannot connect: {exc.strerror or exc}") from None
        session = cls(reader, writer, chosen.timeout)
        try:
            await session.expect("greeting", 220)
            await session.ehlo()
            if context is not None:
                await session.starttls(context, chosen.target.host)
            if chosen.login is not None:
                await session.auth(*chosen.login)
        except SessionLost:
            session.close()
            raise
        return session

    async def command(self, line: str) -> Reply:
        self.writer.write(line.encode() + b"\r\n")
        return await self.reply()

    async def expect(self, what: str, code: int, line: str | None = None) -> Reply:
        reply = await (self.reply() if line is None else self.command(line))
        if reply.code != code:
            raise SessionLost(f"{what} refused: {reply_key(reply)}")
        return reply

    async def _lines(self) -> list[str]:
        """The lines of one reply, read within the timeout."""
        lines = []
        try:
            async with asyncio.timeout(self.timeout):
                while True:
                    line = await self.reader.readline()
                    if not line.endswith(b"\n"):
                        raise SessionLost("connection lost")
                    lines.append(line.decode("utf-8", "replace").rstrip("\r\n"))
                    if line[3:4] != b"-":
                        return lines
        except TimeoutError:
            raise SessionLost("timeout") from None
        except (OSError, ValueError) as exc:  # a reset, a TLS alert; a line over 64 KiB
            raise SessionLost(f"connection lost: {exc}") from None

    async def reply(self) -> Reply:
        last = (await self._lines())[-1]
        if not (last[:3].isdigit() and "200" <= last[:3] <= "599"):
            raise SessionLost(f"not an SMTP reply: {last[:40]!r}")
        enhanced = _ENHANCED.match(last[4:] + " ")
        text = last[4 + enhanced.end() :] if enhanced else last[4:]
        return Reply(int(last[:3]), enhanced.group(1) if enhanced else "", text)

    async def ehlo(self) -> None:
        self.writer.write(f"EHLO {HELO}\r\n".encode())
        lines = await self._lines()
        if not lines[-1].startswith("250"):
            raise SessionLost(f"EHLO refused: {lines[-1]}")
        for line in lines[1:]:
            keyword, _, rest = line[4:].partition(" ")
            self.extensions[keyword.upper()] = rest.upper()

    async def starttls(self, context: ssl.SSLContext, host: str) -> None:
        if "STARTTLS" not in self.extensions:
            raise SessionLost("the server offers no STARTTLS")
        await self.expect("STARTTLS", 220, "STARTTLS")
        try:
            async with asyncio.timeout(self.timeout):
                await self.writer.start_tls(context, server_hostname=host)
        except (OSError, TimeoutError) as exc:
            raise SessionLost(f"STARTTLS: {'timeout' if isinstance(exc, TimeoutError) else exc}") from None
        self.extensions.clear()
        await self.ehlo()

    async def auth(self, user: str, password: str) -> None:
        mechanisms = self.extensions.get("AUTH", "").split()
        if "PLAIN" in mechanisms:
            token = base64.b64encode(f"\0{user}\0{password}".encode()).decode()
            await self.expect("AUTH", 235, f"AUTH PLAIN {token}")
        elif "LOGIN" in mechanisms:
            await self.expect("AUTH", 334, "AUTH LOGIN")
            await self.expect("AUTH", 334, base64.b64encode(user.encode()).decode())
            await self.expect("AUTH", 235, base64.b64encode(password.encode()).decode())
        else:
            raise SessionLost("the server offers neither AUTH PLAIN nor AUTH LOGIN")

    async def send(self, sender: str, recipients: Sequence[str], data: bytes, tally: Tally) -> Reply:
        """One transaction; the reply that settles it: the end of DATA's, else the first
        refusal (each recipient's reply is counted in tally). Pipelined when the server
        offers PIPELINING."""
        commands = [f"MAIL FROM:<{sender}>", *(f"RCPT TO:<{r}>" for r in recipients), "DATA"]
        if "PIPELINING" in self.extensions:
            self.writer.write("".join(c + "\r\n" for c in commands).encode())
            answers = [await self.reply() for _ in commands]
        else:
            answers = [await self.command(commands[0])]
            if not answers[0].is_success:
                return answers[0]  # no transaction
            answers += [await self.command(line) for line in commands[1:]]
        mail, *rcpts, ready = answers
        if not mail.is_success:
            return mail
        for reply in rcpts:
            tally.recipient(reply)
        refusal = next((r for r in rcpts if not r.is_success), None)
        if ready.code != 354:
            await self.command("RSET")
            return refusal or ready
        if not any(r.is_success for r in rcpts):  # a server that says 354 to no recipient
            await self.command(".")
            return refusal or ready
        self.writer.write(data + b".\r\n")
        began = time.perf_counter()
        reply = await self.reply()
        tally.data_seconds.append(time.perf_counter() - began)
        return reply

    async def quit(self) -> None:
        with contextlib.suppress(SessionLost):
            await self.command("QUIT")

    def close(self) -> None:
        self.writer.close()


# --- the run ------------------------------------------------------------------------


def client_context(chosen: Options) -> ssl.SSLContext:
    """One context for every connection (one per STARTTLS costs 10x in handshakes)."""
    context = ssl.create_default_context()
    if chosen.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


async def _connection(chosen: Options, context: ssl.SSLContext | None, schedule: Schedule, corpus: Corpus,
                      tally: Tally) -> None:  # fmt: skip
    """One connection's share of the schedule: connect again after a lost one; give up
    its share (left to the others) when a connection cannot be made."""
    while True:
        try:
            session = await Session.open(chosen, context)
        except SessionLost as lost:
            tally.failures[str(lost)] += 1
            return
        try:
            while (taken := schedule.take()) is not None:
                index, due = taken
                if not await schedule.wait_until(due):
                    break  # stopped: the message is counted as not sent
                recipients = corpus.envelope(index)
                data = corpus.message(index, recipients)
                began = time.perf_counter()
                try:
                    reply = await session.send(chosen.sender, recipients, data, tally)
                except SessionLost as lost:
                    tally.fail(str(lost))
                    break
                tally.settle(reply, time.perf_counter() - began)
                if reply.code == 421:  # the server closes this session
                    break
            else:
                await session.quit()
                return
        finally:
            session.close()
        if schedule.stopped.is_set():
            return


async def _report(tally: Tally, finished: asyncio.Event, out: TextIO | None) -> None:
    last = (0.0, 0)
    while not finished.is_set():
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(tally.chosen.every):
                await finished.wait()
        if out is not None and not finished.is_set():
            line = tally.progress(last)
            last = (tally.elapsed(), tally.settled)
            print(line, file=out, flush=True)


async def blast(chosen: Options, progress: TextIO | None = sys.stderr) -> Tally:
    """Send what was chosen; SIGINT or SIGTERM stop the schedule (what is in flight is
    settled). One TaskGroup owns the connections and the progress lines."""
    loop = asyncio.get_running_loop()
    context = client_context(chosen) if chosen.starttls else None
    tally = Tally(chosen)
    schedule = Schedule(chosen.messages, chosen.rate)
    corpus = Corpus(chosen)
    finished = asyncio.Event()
    left = chosen.connections

    async def connection() -> None:
        nonlocal left
        try:
            await _connection(chosen, context, schedule, corpus, tally)
        finally:
            left -= 1
            if not left:
                finished.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, schedule.stop)
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(_report(tally, finished, progress))
            for _ in range(chosen.connections):
                group.create_task(connection())
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    tally.ended = time.monotonic()
    return tally


def run(
    chosen: Options, *, as_json: bool = False, progress: TextIO | None = sys.stderr, out: TextIO = sys.stdout
) -> bool:
    """Run the blast on uvloop and print its summary; True when every message was
    accepted for every recipient."""
    import uvloop

    tally = uvloop.run(blast(chosen, progress))
    summary = tally.summary()
    print(json.dumps(summary) if as_json else summary_text(summary), file=out, flush=True)
    return tally.clean
