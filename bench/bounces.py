"""The bounces part: how mtad reads real bounces, against Sisimai's verdicts.

Every message of a corpus directory (`--bounce-corpus`: Sisimai's
set-of-emails/maildir/bsd, fetched from github:sisimai/set-of-emails) is read by
mtad's reader (`mtad.feedback.reports.parse`, with the shipped reply table) in this
process, one after the other, and compared with Sisimai's own expected results: the
test tables of a go-sisimai checkout (`--bounce-tables`: fact/*_test.go of
github:sisimai/go-sisimai; per message and recipient index, the status, the reply
code, the reason and whether it is a hard bounce). The tables do not name the
recipient: it is taken from what Sisimai decodes of the message, by Debian's
libsisimai-perl (or a JSON file of another decoder's results, `--bounce-reference`),
where it decodes that index.

Every figure is over the expected entries (a message of several recipients or
reports has an entry each), per family of sending software (the file name without its
number: lhost-postfix, rhost-google, arf, rfc3464, ...) and in total:
- recognised: mtad reads the message as what it is: a bounce, a complaint (Sisimai's
  reason feedback), an automatic reply (vacation) or a notice of delivery (delivered);
- recipient: the recipient Sisimai decodes at that index is one mtad reports (over the
  entries the reference decodes);
- status: mtad's enhanced status code for that recipient is Sisimai's, over the
  entries whose code is a real one (neither empty nor one of Sisimai's own x.0.9xx);
- hard/soft: over the bounces, mtad says the address is gone (suppressed at once)
  exactly where Sisimai calls it a hard bounce; `over` counts where mtad would
  suppress and Sisimai would not;
- reason: mtad's reason is Sisimai's (Sisimai's speeding is mtad's ratelimited;
  failedstarttls securityerror; notcompliantrfc contenterror; mailererror systemerror).
Read time is the CPU time of a `parse` of each message (the reading thread's, the
least of three reads: neither other processes on the machine nor a collection of
garbage inflate it), over every message of the corpus, and the longest wall time
of a first read; an exception out of `parse` is counted and fails the part.
Status is compared over the bounces only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import smtplib
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import sink
from bench.mtad_server import Delivery, MtadError, MtadServer
from mtad.feedback import reports, suppression
from mtad.feedback.verp import Verp

ERRORS = (OSError, ValueError, subprocess.SubprocessError, smtplib.SMTPException, MtadError, sink.SinkError,
          TimeoutError)  # fmt: skip

# Goals of the issue, checked in the notes.
GOALS = {"recognised": 0.97, "recipient": 0.97, "status": 0.95, "hard/soft": 0.95}
P99_MS = 5.0
LOOP_MS = 50.0  # the most a report may take on the inbound listener's event loop
INLINE = 16 * 1024  # reports up to this size are read on the event loop (mtad.feedback.inbound.INLINE)

_ENTRY = re.compile(r'\{"(\w+)",\s*(\d+),\s*"([^"]*)",\s*"([^"]*)",\s*"([^"]*)",\s*(true|false),\s*"([^"]*)"\}')
_LIST = re.compile(
    r"(publiclist|secretlist)\s*:=\s*\[\]\[\]IsExpected\{(.*?)\}\s*;?\s*EngineTest\(t,\s*\"([^\"]+)\",\s*\w+,\s*(true|false)\)",
    re.S,
)
_TEST = re.compile(r"func Test(Lhost|Rhost)?\w+\(")
_PSEUDO = re.compile(r"^\d\.\d+\.9\d\d$")  # Sisimai's own codes: 5.0.910 filtered, ...
_SAME_REASON = {"speeding": "ratelimited", "failedstarttls": "securityerror", "notcompliantrfc": "contenterror",
                "mailererror": "systemerror"}  # fmt: skip

# Sisimai, as Debian packages it (libsisimai-perl): what it decodes of each message.
_PERL = r"""
use strict; use warnings; use Sisimai; use JSON::PP;
my $out = {};
for my $path (@ARGV) {
    my $found = Sisimai->make($path, delivered => 1, vacation => 1) || [];
    my @rows = map { { recipient => $_->recipient->address, reason => $_->reason } } @$found;
    $out->{(split m{/}, $path)[-1]} = \@rows;
}
print JSON::PP->new->canonical->encode($out);
"""


@dataclass(frozen=True, slots=True)
class Expected:
    file: str
    index: int
    status: str
    reason: str
    hard: bool

    @property
    def kind(self) -> str:
        return {"feedback": "complaint", "vacation": "auto_reply", "delivered": "delivered"}.get(self.reason, "bounce")

    @property
    def family(self) -> str:
        return re.sub(r"-\d+\.eml$", "", self.file)


@dataclass(frozen=True, slots=True)
class Found:
    """One recipient (or report) of what mtad read."""

    recipient: str | None
    status: str | None
    reason: str | None
    hard: bool


@dataclass(frozen=True, slots=True)
class Read:
    kind: str  # bounce, complaint, auto_reply, delivered, reply, unknown
    found: tuple[Found, ...]
    seconds: float  # wall time
    cpu: float  # this thread's CPU time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("bounces")
    group.add_argument("--bounce-corpus", type=Path, default=None,
                       help="a directory of bounce messages (set-of-emails/maildir/bsd)")  # fmt: skip
    group.add_argument("--bounce-tables", type=Path, default=None,
                       help="a go-sisimai checkout, whose fact/*_test.go hold the expected results")  # fmt: skip
    group.add_argument("--bounce-reference", type=Path, default=None,
                       help="JSON {file: [{recipient}]} of a decoder's results (default: libsisimai-perl)")  # fmt: skip


def expectations(tables: Path) -> dict[str, dict[int, Expected]]:
    """Sisimai's expected results of its public samples, from the test tables."""
    found: dict[str, dict[int, Expected]] = defaultdict(dict)
    facts = tables / "fact" if (tables / "fact").is_dir() else tables
    for path in sorted(facts.glob("*_test.go")):
        text = path.read_text(errors="replace")
        test = _TEST.search(text)
        if test is None:
            continue
        prefix = {"Lhost": "lhost-", "Rhost": "rhost-"}.get(test.group(1) or "", "")
        for block in _LIST.finditer(text):
            if block.group(4) != "true":  # the private samples are not published
                continue
            for e in _ENTRY.finditer(block.group(2)):
                file = f"{prefix}{block.group(3).lower()}-{e.group(1)}.eml"
                found[file][int(e.group(2))] = Expected(file, int(e.group(2)), e.group(3), e.group(5),
                                                        e.group(6) == "true")  # fmt: skip
    if not found:
        raise ValueError(f"{tables}: no Sisimai test tables (fact/*_test.go) found")
    return found


def reference(corpus: Path, given: Path | None) -> tuple[dict[str, list[dict[str, Any]]], str]:
    """What a reference decoder makes of each message, and its name."""
    if given is not None:
        return json.loads(given.read_text()), f"`{given.name}`"
    if shutil.which("perl") is None or subprocess.run(["perl", "-MSisimai", "-e1"], capture_output=True).returncode:
        return {}, "none (libsisimai-perl is not installed)"
    paths = [str(p) for p in sorted(corpus.iterdir()) if p.is_file()]
    done = subprocess.run(["perl", "-e", _PERL, *paths], capture_output=True, check=True, timeout=600)
    version = subprocess.run(["perl", "-MSisimai", "-e", "print $Sisimai::VERSION"], capture_output=True, text=True)
    return json.loads(done.stdout), f"Sisimai {version.stdout.strip()} (Debian's libsisimai-perl)"


def read(raw: bytes) -> Read:
    """What mtad makes of one message, in the terms compared."""
    started, cpu = time.perf_counter(), time.thread_time()
    report = reports.parse(raw)
    seconds, cpu = time.perf_counter() - started, time.thread_time() - cpu
    match report:
        case reports.Bounce():
            found = tuple(Found(f.recipient, f.status, f.reason.value, f.hard) for f in report.recipients)
            return Read("bounce", found, seconds, cpu)
        case reports.Complaints():
            return Read("complaint", tuple(Found(c.recipient, None, "feedback", False) for c in report.reports),
                        seconds, cpu)  # fmt: skip
        case reports.AutoReply():
            return Read("auto_reply", (Found(report.sender, None, "vacation", False),), seconds, cpu)
        case reports.Delivered():
            return Read("delivered", tuple(Found(r, None, "delivered", False) for r in report.recipients), seconds, cpu)
        case reports.Reply():
            return Read("reply", (), seconds, cpu)
        case reports.Unknown():
            return Read("unknown", (), seconds, cpu)
    raise AssertionError(report)


@dataclass
class Tally:
    entries: int = 0
    recognised: int = 0
    with_recipient: int = 0
    recipient: int = 0
    with_status: int = 0
    status: int = 0
    bounces: int = 0
    agree: int = 0
    over: int = 0
    reason: int = 0

    def add(self, expected: Expected, mtad: Read, recipient: str | None) -> None:
        self.entries += 1
        self.recognised += mtad.kind == expected.kind
        found = _match(mtad.found, recipient, expected.index)
        if recipient:
            self.with_recipient += 1
            self.recipient += any(_same(f.recipient, recipient) for f in mtad.found)
        if expected.kind == "bounce" and expected.status and not _PSEUDO.match(expected.status):
            self.with_status += 1
            self.status += found is not None and found.status == expected.status
        if expected.kind == "bounce":
            self.bounces += 1
            hard = found is not None and mtad.kind == "bounce" and found.hard
            self.agree += hard == expected.hard
            self.over += hard and not expected.hard
        reason = _SAME_REASON.get(expected.reason, expected.reason)
        self.reason += found is not None and found.reason == reason

    def row(self, name: str) -> list[str]:
        return [name, str(self.entries), _share(self.recognised, self.entries),
                _share(self.recipient, self.with_recipient), _share(self.status, self.with_status),
                _share(self.agree, self.bounces), str(self.over), _share(self.reason, self.entries)]  # fmt: skip

    def shares(self) -> dict[str, float]:
        return {"recognised": self.recognised / max(self.entries, 1),
                "recipient": self.recipient / max(self.with_recipient, 1),
                "status": self.status / max(self.with_status, 1),
                "hard/soft": self.agree / max(self.bounces, 1)}  # fmt: skip


def _match(found: Sequence[Found], recipient: str | None, index: int) -> Found | None:
    """mtad's entry for an expected one: by its recipient, else by its place."""
    if recipient:
        for f in found:
            if _same(f.recipient, recipient):
                return f
    return found[index - 1] if index <= len(found) else None


def _same(a: str | None, b: str | None) -> bool:
    return bool(a and b) and a.strip("<>").lower() == b.strip("<>").lower()  # type: ignore[union-attr]


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f} % ({part}/{whole})" if whole else "-"


def measure(corpus: Path, tables: Path, given: Path | None) -> tuple[str, list[str], bool]:
    expected = expectations(tables)
    decoded, decoder = reference(corpus, given)
    files = sorted(p for p in corpus.iterdir() if p.is_file())
    if files:
        reports.parse(files[0].read_bytes())  # the reply table read and its patterns compiled, as at a daemon's start
    mtad: dict[str, Read] = {}
    failures: list[str] = []
    for path in files:
        try:
            raw = path.read_bytes()
            first = read(raw)
            cpu = min([first.cpu, *(read(raw).cpu for _ in range(2))])  # the least of 3: the read's own cost
            mtad[path.name] = dataclasses.replace(first, cpu=cpu)
        except Exception as exc:  # counted: parse must never raise
            failures.append(f"{path.name}: {type(exc).__name__}: {exc}")
    families: dict[str, Tally] = defaultdict(Tally)
    total = Tally()
    for file, entries in sorted(expected.items()):
        if file not in mtad:
            continue
        for index, e in sorted(entries.items()):
            rows = decoded.get(file, [])
            recipient = rows[index - 1].get("recipient") if index <= len(rows) else None
            families[e.family].add(e, mtad[file], recipient)
            total.add(e, mtad[file], recipient)
    times = sorted(r.cpu * 1000 for r in mtad.values())
    p50, p99 = statistics.median(times), times[min(len(times) - 1, int(len(times) * 0.99))]
    wall = max(r.seconds * 1000 for r in mtad.values())
    header = ["family", "entries", "recognised", "recipient", "status", "hard/soft", "over", "reason"]
    table = [total.row("**all**")] + [families[f].row(f) for f in sorted(families)]
    body = "\n".join(_lines(header, table))
    unexpected = len([f for f in mtad if f not in expected])
    body = (
        f"- corpus: `{corpus}`, {len(files)} messages, {total.entries} expected entries in "
        f"{len(files) - unexpected} of them ({unexpected} have none and are only read)\n"
        f"- expected results: `{tables}` (Sisimai's test tables); recipients from {decoder}\n"
        f"- read time per message (CPU of the reading thread): p50 {p50:.2f} ms, p99 {p99:.2f} ms, max "
        f"{times[-1]:.2f} ms; the longest wall time {wall:.2f} ms; exceptions: {len(failures)}\n\n{body}\n"
    )
    notes = failures[:10]
    shares = total.shares()
    for name, goal in GOALS.items():
        if shares[name] < goal:
            notes.append(f"{name} {100 * shares[name]:.1f} % is under the goal of {100 * goal:.0f} %")
    if p99 > P99_MS:
        notes.append(f"p99 read time {p99:.2f} ms is over {P99_MS} ms")
    worst = {name: min(read(raw).cpu for _ in range(3)) * 1000 for name, raw in hostile().items()}
    body += (
        f"\nHostile reports of {INLINE // 1024} KiB (the most the inbound listener reads on its event loop; "
        "larger ones are read in a thread), CPU per read, the least of 3:\n\n"
        + "\n".join(f"- {name}: {ms:.1f} ms" for name, ms in worst.items())
        + "\n"
    )
    if max(worst.values()) > LOOP_MS:
        notes.append(f"a hostile report takes {max(worst.values()):.1f} ms on the event loop, over {LOOP_MS} ms")
    if total.over * 2 > total.bounces - total.agree:
        notes.append(f"mtad errs towards suppressing in {total.over} of {total.bounces - total.agree} disagreements")
    return body, notes, not failures


def hostile(size: int = INLINE) -> dict[str, bytes]:
    """Reports made to cost the reader the most at the size the inbound listener reads
    on its event loop: many recipients, an address soup, replies on every line."""
    head = "From: MAILER-DAEMON@example.org\nSubject: Undelivered Mail Returned to Sender\n\n"
    dsn = ("From: MAILER-DAEMON@example.org\nContent-Type: multipart/report; report-type=delivery-status; "
           "boundary=b\n\n--b\nContent-Type: message/delivery-status\n\n")  # fmt: skip
    texts = {
        "200 recipients, each with its reply": head
        + "".join(
            f"<u{i}@example.com>: host mx.example.com said: 550 5.1.1 <u{i}@example.com>: Recipient address "
            "rejected: User unknown in local recipient table (in reply to RCPT TO command)\n\n"
            for i in range(200)
        ),
        "200 delivery status blocks": dsn
        + "".join(
            f"Final-Recipient: rfc822; u{i}@example.com\nAction: failed\nStatus: 5.1.1\n"
            f"Diagnostic-Code: smtp; 550 5.1.1 user unknown {'x' * 80}\n\n"
            for i in range(200)
        ),
        "3,000 distinct addresses, one a line": head + "".join(f"u{i}@example.com\n" for i in range(3000)),
        "one address 3,000 times": head + "a@example.com " * 3000,
        "a reply on every line": head
        + "".join(
            f"u{i}@example.com: 550 5.1.1 mailbox {i} is over quota; spam; blocked by policy\n" for i in range(3000)
        ),
    }
    return {name: text.encode()[:size] for name, text in texts.items()}


def _lines(header: list[str], rows: Iterable[list[str]]) -> Iterable[str]:
    yield "| " + " | ".join(header) + " |"
    yield "|" + "|".join("---" for _ in header) + "|"
    for row in rows:
        yield "| " + " | ".join(row) + " |"


# --- the suppression list after a run over the corpus --------------------------------------------------

BOUNCE_DOMAIN = "bounces.example.org"
SENDER = "app@example.org"
WAIT = 120.0  # seconds for the deliveries, then the consumers, to catch up


def after_a_run(corpus: Path, tables: Path, given: Path | None, root: Path) -> tuple[str, list[str], bool]:
    """Run the corpus through `mtad run`: a message to each report's first recipient
    (Sisimai's), delivered to a sink, then the report sent to the inbound listener at
    that delivery's VERP address, as if it had come back for it; then read what the
    suppression list holds."""
    expected = expectations(tables)
    decoded, _ = reference(corpus, given)
    chosen: dict[str, str] = {}  # file -> the recipient its mail went to
    for file, entries in expected.items():
        rows = decoded.get(file, [])
        if (corpus / file).is_file() and rows and rows[0].get("recipient") and 1 in entries:
            chosen[file] = str(rows[0]["recipient"])
    domains = sorted({r.rpartition("@")[2].lower() for r in chosen.values()})
    workdir = root / "suppression"
    workdir.mkdir(parents=True, exist_ok=True)
    key_file = workdir / "bounces.key"
    key_file.write_text(os.urandom(32).hex())
    verp = Verp(BOUNCE_DOMAIN, key_file.read_bytes().strip())  # the daemon reads the file's bytes as the key
    inbound_port = sink.free_port()
    notes: list[str] = []
    with sink.Sink() as the_sink:
        relay = f"{the_sink.host}:{the_sink.port}"
        routes = "".join(f'[routes."{d}"]\nrelay = "{relay}"\n' for d in domains[1:])
        extra = (f'[bounces]\ndomain = "{BOUNCE_DOMAIN}"\nkey_file = "{key_file}"\n[inbound]\n'
                 f'listen = ["127.0.0.1:{inbound_port}"]\nmax_per_minute = 1000000\n{routes}')  # fmt: skip
        with MtadServer(workdir / "mtad", Delivery(relay, domains[0]), extra) as server:
            sent = _submit(server, chosen)
            _wait(lambda: server.states().get("delivered", 0) >= len(sent), f"{len(sent)} deliveries delivered")
            spooled = server.query("SELECT d.id, m.message_id FROM deliveries d JOIN messages m ON m.id = d.message")
            delivery = {m: int(i) for i, m in (row.split("|", 1) for row in spooled)}
            with smtplib.SMTP("127.0.0.1", inbound_port, timeout=30) as smtp:
                for file, message_id in sent.items():
                    smtp.sendmail("<>", [verp.sender(delivery[message_id])], (corpus / file).read_bytes())
            kinds = ", ".join(f"'{k}'" for k in sorted(suppression.Suppressor.kinds))
            done = ("SELECT NOT EXISTS (SELECT 1 FROM events e JOIN event_consumers c ON c.name = 'suppression' "
                    f"WHERE e.kind IN ({kinds}) AND (e.xid, e.id) > (c.position_xid, c.position_id))")  # fmt: skip
            _wait(lambda: server.query(done) == ["t"], "the suppression consumer caught up")
            held = [row.split("|") for row in server.query("SELECT address, reason FROM suppressions ORDER BY 1")]
            notes += [f"suppression run: mtad logged {n} x `{text}`" for text, n in server.log_problems().items()]
            notes += [f"suppression run: {line}" for line in server.problem_lines()]
    hard_of: dict[str, bool] = defaultdict(bool)  # Sisimai calls one of the address's bounces hard
    for file, recipient in chosen.items():
        if file in sent:
            hard_of[recipient.lower()] |= expected[file][1].hard
    by_reason: dict[str, list[str]] = defaultdict(list)
    for address, reason in held:
        by_reason[reason].append(address)
    wrong = [a for a in by_reason.get("hard_bounce", []) if not hard_of.get(a)]
    missed = sorted(a for a, hard in hard_of.items() if hard and a not in {h[0] for h in held})
    lines = [f"- {len(sent)} reports sent to the inbound listener, each about a delivery of its own; "
             f"{len(held)} addresses on the suppression list after it"]  # fmt: skip
    for reason, addresses in sorted(by_reason.items()):
        agree = sum(hard_of.get(a, False) for a in addresses)
        lines.append(f"- {reason}: {len(addresses)} ({agree} of them an address Sisimai calls a hard bounce)")
    lines.append(f"- suppressed as gone where no bounce of the address is hard for Sisimai: {len(wrong)}"
                 + (f" ({', '.join(wrong[:10])})" if wrong else ""))  # fmt: skip
    lines.append(f"- addresses Sisimai calls hard that mtad left off the list: {len(missed)} of "
                 f"{sum(hard_of.values())}")  # fmt: skip
    if wrong:
        notes.append(f"{len(wrong)} addresses suppressed as gone that Sisimai does not call hard")
    return "\n".join(lines) + "\n", notes, not wrong


def _submit(server: MtadServer, chosen: Mapping[str, str]) -> dict[str, str]:
    """One message to each file's recipient; {file: its Message-ID} of those accepted."""
    sent = {}
    with smtplib.SMTP(server.host, server.port, timeout=30) as smtp:
        for number, (file, recipient) in enumerate(sorted(chosen.items())):
            message_id = f"<bounces-{number}@bench.example.org>"
            body = f"From: {SENDER}\r\nTo: {recipient}\r\nMessage-ID: {message_id}\r\nSubject: {file}\r\n\r\nhi\r\n"
            try:
                smtp.sendmail(SENDER, [recipient], body)
            except smtplib.SMTPRecipientsRefused:  # an address the corpus anonymised past what SMTP takes
                continue
            sent[file] = message_id
    return sent


def _wait(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done within {WAIT:.0f} s: {what}")
        time.sleep(0.25)


def run(args: argparse.Namespace, root: Path, versions: Mapping[str, str]) -> tuple[str, list[str], bool]:
    if args.bounce_corpus is None or args.bounce_tables is None:
        raise ValueError("give --bounce-corpus DIR and --bounce-tables DIR (see bench/bounces.py)")
    body, notes, ok = measure(args.bounce_corpus, args.bounce_tables, args.bounce_reference)
    print(body)
    held, more, _ = after_a_run(args.bounce_corpus, args.bounce_tables, args.bounce_reference, root)
    print(held)
    body += "\nThe suppression list after a run over the corpus through `mtad run`:\n\n" + held
    return body, notes + more, ok  # a suppression Sisimai disagrees with is a note, not a failed run
