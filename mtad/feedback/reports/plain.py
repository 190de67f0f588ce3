"""Bounces written as plain text, whatever software wrote them (qmail, Exim, Sendmail,
Yahoo, OpenSMTPD, DragonFly, Exchange, ...): the recipients the notification
names where a recipient is named, and what it says next to each.

An address counts as a failed recipient where it stands as one: alone on its line
or at its start ("<x@y>:", "  x@y", "x@y [User unknown]"), or after words that
introduce one ("delivering your mail to", "Recipient:", "RCPT TO:<"). Addresses
of the sender (the report's To, the original's From), of mail systems and in
"MAIL FROM" are never recipients. What follows the first such mention, up to a
blank line or the next recipient, is its diagnostic; when that holds no reply,
the paragraphs after it. Sync, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from mtad.feedback.reports.said import ADDRESS, Said, code_in, command_in, is_daemon, squeeze, status_in

RECIPIENTS = 100
_LINES = 12  # lines of a recipient's own diagnostic, at most
_MENTIONS = 4 * RECIPIENTS  # addresses looked at, at most: a report names each recipient a few times
_LEADING = 4  # lines before a recipient's mention that may say which command was refused (a transcript)
_AROUND = 1000  # characters of the text read when a recipient's block says nothing
_AFTER_FOR = 10  # recipients whose block says nothing that get the text after it (a report names a few)
# Words before an address that make it the recipient's.
_INTRO = re.compile(
    r"(?:\bto|recipients?|addressee|address(?:es)?|rcpt to|for|mailbox|user|account|destinat(?:ion|aire)|"
    r"original-recipient|final-recipient|x-failed-recipients|delivering your (?:mail|message) to|message to|"
    r"sent to|mail to|deliver(?:ed|y)? to|could not (?:be )?deliver(?:ed)? to|envoy[ée] [àa]|an|aan)"
    r"[\s:;,'\"(<\[]*$",
    re.IGNORECASE,
)
# Words before an address that make it the sender's.
_SENDER_INTRO = re.compile(r"(?:mail from|from|sender|envelope-from|return-path|reply-to)[\s:=;'\"(<]*$", re.I)
_LEAD = re.compile(r"^[\s<>\"'(\[*•·:;,-]*(?:[45]\d\d[ -]+)?(?:rcpt to|to|recipient|original-recipient|"
                   r"final-recipient)?[\s:<\"'(]*$",
                   re.IGNORECASE)  # fmt: skip
_RULE = re.compile(r"^\s*(?:-{3,}|={3,}|_{3,}|\*{3,})")
_ADDRESSES = re.compile(ADDRESS.pattern)
_WORDS = re.compile(r"[A-Za-z]{3,}")
_REPLY_LINE = re.compile(r"^[\s<]*[245]\d\d[ -]")  # "550 ...", "<<< 550 ..."
_FOLLOWING = re.compile(r"(?:following|these) (?:recipients?|address(?:es)?|users?|destinations?)(?:\(\w+\))?"
                        r"(?: or groups)?\s*(?:failed|had|could|was|were|did|:|$)", re.IGNORECASE)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Mention:
    line: int
    end: int  # where the address ends on its line
    address: str
    standing: bool  # stands as a recipient, not only named in passing


def said(text: str, excluded: Collection[str]) -> list[Said]:
    """The recipients the notification `text` (cut before the original) names as
    failed, each with what it says of them; `excluded`: addresses (lower case) that
    are the sender's."""
    lines = text.split("\n")
    mentions = _mentions(lines, excluded)
    standing = [m for m in mentions if m.standing]
    listed = _listed(lines)
    if listed is not None and any(m.line > listed for m in standing):
        standing = [m for m in standing if m.line > listed]  # those after "the following recipients:"
    chosen: dict[str, _Mention] = {}
    for m in standing or mentions:
        chosen.setdefault(m.address.lower(), m)
        if len(chosen) >= RECIPIENTS:
            break
    starts = sorted(m.line for m in chosen.values())
    found = []
    for number, m in enumerate(chosen.values()):
        following = [s for s in starts if s > m.line]
        block, end = _block(lines, m, following[0] if following else len(lines))
        if not block:  # a bare address: what is said may stand just above it ("User not listed\nx@y")
            block = _above(lines, m.line)
        if number < _AFTER_FOR and code_in(block) is None and status_in(block) is None:
            block = f"{block} {_after(lines, end - 1)}".strip()
        command = command_in(block) or command_in(_leading(lines, m.line))
        found.append(
            Said(m.address, "", status_in(block, code_in(block)), code_in(block), squeeze(block) or None, command)
        )
    return found


def _mentions(lines: list[str], excluded: Collection[str]) -> list[_Mention]:
    found: list[_Mention] = []
    standing: set[str] = set()
    for number, line in enumerate(lines):
        if "@" not in line:
            continue
        for match in ADDRESS.finditer(line):
            if len(found) >= _MENTIONS:
                return found
            address = match.group(0).strip(".")
            x400 = address[:5].lower() == "smtp="  # Exchange's X.400 form: "c=US;...;dda:SMTP=x@y;"
            if x400:
                address = address[5:]
            lowered = address.lower()
            if lowered in standing:
                continue  # its first standing mention is the one read
            before = line[: match.start()]
            if lowered in excluded or is_daemon(lowered) or _SENDER_INTRO.search(before[-30:]):
                continue
            if not x400 and (
                before.endswith(("mailto:", "=", "/")) or line[match.end() : match.end() + 1] in ("/", "=")
            ):
                continue  # a link, a URL's parameter
            stands = x400 or bool(_LEAD.match(before)) or bool(_INTRO.search(before[-60:]))
            if stands:
                standing.add(lowered)
            found.append(_Mention(number, match.end(), address, stands))
    return found


def _listed(lines: list[str]) -> int | None:
    """The line that announces the failed recipients ("did not reach the following
    recipient(s):"), if there is one: a summary of the original may come before it."""
    return next((n for n, line in enumerate(lines) if _FOLLOWING.search(line)), None)


def _block(lines: list[str], mention: _Mention, stop: int) -> tuple[str, int]:
    """What follows a recipient's mention: the rest of its line, then the lines up to
    a blank one, a rule, the next recipient, or another reply once it has one (a
    transcript's next line is another's); and the line after it."""
    line = lines[mention.line]
    rest = line[mention.end :].lstrip(">:;,.)] \t")
    taken = [line.strip() if _WORDS.search(_ADDRESSES.sub("", line)) else rest]  # words next to it say why
    if not _ADDRESSES.sub("", taken[0]).strip(" <>()[]:;,.\t"):
        taken = []
    replied = bool(taken) and code_in(taken[0]) is not None
    at = mention.line + 1
    for at in range(mention.line + 1, min(stop, mention.line + 1 + _LINES)):
        line = lines[at]
        if not line.strip():
            if taken:
                break
            continue
        if _RULE.match(line) or (replied and _REPLY_LINE.match(line)):
            break
        taken.append(line.strip())
        replied = replied or code_in(line) is not None
    else:
        at = min(stop, mention.line + 1 + _LINES)
    return " ".join(taken), at


def _above(lines: list[str], at: int) -> str:
    """The words on the lines just above line `at` that hold no address, up to a blank line or a rule."""
    taken: list[str] = []
    for line in reversed(lines[max(0, at - _LEADING) : at]):
        if not line.strip() or _RULE.match(line) or "@" in line:
            break
        taken.insert(0, line.strip())
    return " ".join(taken)


def _leading(lines: list[str], at: int) -> str:
    """The lines just above line `at` (a transcript's last commands), up to a blank one."""
    start = at
    while start > 0 and at - start < _LEADING and lines[start - 1].strip():
        start -= 1
    return "\n".join(lines[start : at + 1])


def _after(lines: list[str], start: int) -> str:
    """The lines after line `start` but rules, up to _AROUND characters."""
    taken: list[str] = []
    size = 0
    for line in lines[start + 1 :]:
        if size >= _AROUND:
            break
        if not _RULE.match(line):
            taken.append(line)
            size += len(line) + 1
    return squeeze(" ".join(taken)[:_AROUND])
