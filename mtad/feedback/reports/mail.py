"""A report as its readers see it: its header, the text of the notification
(decoded, with LF line endings, cut before the original it returns), the texts of
its field parts (delivery status, feedback report), and the header of the original.

A part that does not parse (a broken MIME boundary, a missing part) is read as
text: the readers look for fields and addresses in the text too. Sync, no I/O.
"""

from __future__ import annotations

import contextlib
import email
import email.header
import email.parser
import email.policy
import email.utils
import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message

_POLICY = email.policy.compat32
MULTIPARTS = 64  # a report has a few; thousands nested cost the email package seconds
# A line that says the original follows: "------ This is a copy of the message", "--- Below
# this line is a copy of the message.", "Original message headers:", "Message headers follow."
_QUOTED = re.compile(
    r"[ \t>]*[-=_*#]*[ \t]*(?:(?:this is a |a |here is a )?copy of (?:the |your )?(?:original |returned )?"
    r"(?:message|mail|e-?mail)|below (?:this line )?is (?:a copy|the original)|(?:the )?original message"
    r"(?:\s+(?:follows|headers?|below|text|is (?:attached|below|included)))?\s*[:.-]*\s*$|unsent message|"
    r"returned (?:mail|message)(?: text| follows|[ -]*$)|message headers? follows?|enclosed is a copy|undelivered "
    r"message (?:follows|headers)|headers? of (?:the )?(?:original|returned) (?:message|mail)|original headers|the "
    r"rfc822 headers|content-type: message/rfc822|content-type: text/rfc822-headers|--- headers of the message|"
    r"(?:original|returned) message below)",
    re.IGNORECASE,
)
_QUOTED_LINE = 100  # characters of a line that says so, at most
_QUOTED_HINT = re.compile(r"copy|original|unsent|returned|headers?|enclosed|undelivered|rfc822|below", re.IGNORECASE)
# Field parts are read as text, as they were written: the email package would parse them into
# blocks of headers, and a Diagnostic-Code continued on an unindented line would end a block.
_FIELD_PARTS = re.compile(rb"(content-type:[ \t]*)message/(delivery-status|global-delivery-status|feedback-report)",
                          re.IGNORECASE)  # fmt: skip
_STATUS_PARTS = ("text/x-mtad-delivery-status", "text/x-mtad-global-delivery-status")
_FEEDBACK_PART = "text/x-mtad-feedback-report"
_TAG = re.compile(r"<(?:br|p|div|tr|li|h\d)\b[^>]*>|</(?:p|div|tr|li|h\d|table)>", re.IGNORECASE)
_ANY_TAG = re.compile(r"<[^>]*>")
_STYLE = re.compile(r"<(style|script|head)\b.*?</\1>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Mail:
    head: Message  # the report's own header
    text: str  # the notification's text, before the original (LF line endings)
    status: tuple[str, ...]  # the message/delivery-status parts (as text)
    feedback: tuple[str, ...]  # the message/feedback-report parts (as text)
    original: Message | None  # the header of the returned original, when it comes with one
    originals: tuple[Message, ...] = ()  # every message/rfc822 part (several reports in one message)

    def header(self, name: str) -> str:
        """A header's value unfolded and decoded ("" when absent)."""
        return header(self.head, name)


def read(raw: bytes) -> Mail:
    """The report `raw` (bytes as received, any line endings); ValueError when it nests
    more than MULTIPARTS multiparts."""
    if raw.lower().count(b"multipart") > MULTIPARTS:
        raise ValueError(f"more than {MULTIPARTS} multipart parts")
    raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    msg = email.message_from_bytes(_FIELD_PARTS.sub(rb"\1text/x-mtad-\2", raw), policy=_POLICY)
    texts: list[str] = []
    htmls: list[str] = []
    status: list[str] = []
    feedback: list[str] = []
    originals: list[Message] = []
    headers: list[str] = []
    for part, kind in parts(msg):
        if kind in _STATUS_PARTS:
            status.append(text(part))
        elif kind == _FEEDBACK_PART:
            feedback.append(text(part))
        elif kind in ("message/rfc822", "message/global", "message/partial"):
            payload = part.get_payload()
            if isinstance(payload, list) and payload and isinstance(payload[0], Message):
                originals.append(payload[0])
            elif isinstance(payload, str):
                headers.append(payload)
        elif kind in ("text/rfc822-headers", "message/global-headers", "message/rfc822-headers"):
            headers.append(text(part))
        elif kind == "text/html":
            htmls.append(text(part))
        elif kind.startswith("text/") or (not kind.startswith(("multipart/", "message/")) and part is msg):
            texts.append(text(part))
        elif kind.startswith("multipart/") and isinstance(part.get_payload(), str):
            texts.append(text(part))  # a multipart whose boundary is not found: its text as it is
    body = "\n".join(texts) if texts else "\n".join(_plain(h) for h in htmls)
    original = originals[0] if originals else None
    if original is None and headers:
        original = _header_block(headers[0])
    quoted = _quoted(body)
    if quoted is not None:
        if original is None:
            original = _header_block(body[quoted:].split("\n", 1)[-1].lstrip("\n -"))
        body = body[:quoted]
    return Mail(msg, body, tuple(status), tuple(feedback), original, tuple(originals))


def _quoted(body: str) -> int | None:
    """Where the line that says the original follows begins, if there is one: only
    the short lines with one of the words such a line has are matched."""
    seen = -1
    for hint in _QUOTED_HINT.finditer(body):
        start = body.rfind("\n", 0, hint.start()) + 1
        if start == seen:
            continue
        seen = start
        end = body.find("\n", hint.start())
        line = body[start : end if end >= 0 else len(body)]
        if len(line) <= _QUOTED_LINE and _QUOTED.match(line):
            return start
    return None


def parts(msg: Message) -> Iterator[tuple[Message, str]]:
    """The message and its parts with their content types, depth first, without going
    into an enclosed message (message/*): the report's own parts. Iterative, so deep
    nesting cannot exhaust the stack."""
    stack = [msg]
    while stack:
        part = stack.pop()
        kind = part.get_content_type()  # once: the email package works it out anew at each call
        yield part, kind
        payload = part.get_payload()
        if kind.startswith("multipart/") and isinstance(payload, list):
            stack.extend(reversed([p for p in payload if isinstance(p, Message)]))


def _header_block(value: str) -> Message | None:
    """The header at the start of `value`, when it starts with one."""
    block = email.parser.HeaderParser(policy=_POLICY).parsestr(value.lstrip())
    return block if len(block) else None


def text(part: Message) -> str:
    """A leaf part's content, decoded (transfer encoding, then charset; what does not
    decode is replaced), with LF line endings."""
    data = part.get_payload(decode=True)
    if not isinstance(data, bytes):
        payload = part.get_payload()
        return payload if isinstance(payload, str) else ""
    charset = part.get_content_charset() or "utf-8"
    try:
        decoded = data.decode(charset, "replace")
    except (LookupError, ValueError):  # a charset Python does not know, or not a text encoding
        decoded = data.decode("utf-8", "replace")
    return decoded.replace("\r\n", "\n").replace("\r", "\n")


def _plain(markup: str) -> str:
    """HTML as text: tags that break lines become newlines, the others go."""
    markup = _STYLE.sub("", markup)
    return html.unescape(_ANY_TAG.sub("", _TAG.sub("\n", markup)))


def header(msg: Message, name: str) -> str:
    """A header's value unfolded and decoded ("" when absent)."""
    value = msg.get(name)
    if value is None:
        return ""
    value = " ".join(str(value).split())
    if "=?" in value:
        with contextlib.suppress(Exception):  # an encoded word that does not decode: the text as it is
            value = str(email.header.make_header(email.header.decode_header(value)))
    return value


def address(value: str) -> str | None:
    """The address a header's value names (the From field's), when it has one."""
    found = email.utils.parseaddr(value)[1]
    return found if "@" in found else None
