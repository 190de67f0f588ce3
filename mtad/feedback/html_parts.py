"""The HTML parts of a message (bytes, CRLF) changed in place: found through nested
multiparts, their transfer encoding (7bit, 8bit, quoted-printable, base64) undone,
their text read as Latin-1 when their charset keeps ASCII where ASCII is (so that a
character is an octet), changed by a callback, and encoded back as they were. A
text part, an attachment and a forwarded message (message/rfc822) are left alone,
and a signed or encrypted multipart leaves the whole message as it came;
every octet outside the HTML parts stays as it was. Sync, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
from collections.abc import Callable
from email import message as email_message
from email import parser, policy

from mtad.base import headers

MAX_DEPTH = 8  # multiparts within multiparts followed at most
MAX_LINE = 998  # octets of a line in 7bit or 8bit at most (RFC 5322); longer: quoted-printable
_PROBE = b'<a href="x" =/>'  # what an HTML text must read as ASCII reads it
_STATEFUL = ("utf_16", "utf_32", "utf_7", "iso2022", "hz")  # charsets whose octets shift meaning
_HEADERS = parser.BytesHeaderParser(policy=policy.compat32)
_SEALED = frozenset({"multipart/signed", "multipart/encrypted"})  # S/MIME, PGP/MIME (RFC 1847)


class Untouched(Exception):
    """The message goes out as it came; the message of the exception says why."""


Change = Callable[[str], str]  # an HTML text (Latin-1 read) to what it becomes; may raise Untouched


def change(message: bytes, edit: Change) -> bytes:
    """The message with each inline HTML part changed by `edit`; Untouched when a part
    cannot be read or written back safely (then nothing is changed)."""
    edits: list[tuple[int, int, bytes]] = []
    _entity(message, 0, len(message), edit, edits, 0)
    if not edits:
        return message
    kept, previous = [], 0
    for start, end, new in sorted(edits):
        kept += [message[previous:start], new]
        previous = end
    kept.append(message[previous:])
    return b"".join(kept)


def _entity(data: bytes, start: int, end: int, edit: Change, edits: list[tuple[int, int, bytes]], depth: int) -> None:
    """The entity data[start:end] (header block, blank line, body): its HTML parts'
    edits appended (absolute offsets)."""
    if data.startswith(headers.CRLF, start):
        head_end = start  # no header fields: text/plain
    else:
        blank = data.find(b"\r\n\r\n", start, end)
        head_end = end if blank < 0 else blank + 2
    block = data[start:head_end]
    fields = _HEADERS.parsebytes(block)
    body_start = min(head_end + 2, end)
    kind = fields.get_content_type()
    if kind in _SEALED:
        raise Untouched(f"a {kind} part: changing it would break its signature")
    if kind.startswith("multipart/"):
        if depth >= MAX_DEPTH:
            raise Untouched(f"multiparts nested deeper than {MAX_DEPTH}")
        boundary = fields.get_param("boundary")
        if not isinstance(boundary, str) or not boundary:
            raise Untouched(f"a {kind} without a boundary")
        for part_start, part_end in _parts(data, body_start, end, boundary.encode("latin-1", "replace")):
            _entity(data, part_start, part_end, edit, edits, depth + 1)
    elif kind == "text/html" and not _attached(fields):
        _html(data, start, head_end, body_start, end, fields, edit, edits)


def _attached(fields: email_message.Message) -> bool:
    return str(fields.get("content-disposition", "")).split(";")[0].strip().lower() == "attachment"


def _parts(data: bytes, start: int, end: int, boundary: bytes) -> list[tuple[int, int]]:
    """Where each part of a multipart body lies: between one delimiter line and the
    CRLF before the next (RFC 2046 5.1.1); Untouched without a closing delimiter."""
    delimiter = re.compile(rb"--" + re.escape(boundary) + rb"(--)?[ \t]*(?=\r\n|\Z)")
    spans: list[tuple[int, int]] = []
    opened: int | None = None
    for found in delimiter.finditer(data, start, end):
        if found.start() > start and data[found.start() - 2 : found.start()] != headers.CRLF:
            continue
        if opened is not None:
            spans.append((opened, max(opened, found.start() - 2)))
        if found.group(1):
            return spans
        opened = min(found.end() + 2, end)
    raise Untouched("a multipart without its closing delimiter")


def _html(
    data: bytes, start: int, head_end: int, body_start: int, end: int,
    fields: email_message.Message, edit: Change, edits: list[tuple[int, int, bytes]],
) -> None:  # fmt: skip
    encoding = str(fields.get("content-transfer-encoding", "7bit")).strip().lower()
    charset = fields.get_content_charset("us-ascii") or "us-ascii"
    if not _ascii_compatible(charset):
        raise Untouched(f"an HTML part in {charset}")
    raw = data[body_start:end]
    text = _decode(raw, encoding).decode("latin-1")
    changed = edit(text)
    if changed == text:
        return
    octets = changed.encode("latin-1")
    if encoding in ("7bit", "8bit", "binary") and any(len(line) > MAX_LINE for line in octets.split(b"\r\n")):
        encoding = "quoted-printable"  # a link grew a line past what 7bit and 8bit allow
        block, _ = headers.remove(data[start:head_end], [b"content-transfer-encoding"])
        edits.append((start, head_end, block + headers.field("Content-Transfer-Encoding", encoding)))
    edits.append((body_start, end, _encode(octets, encoding, raw)))


def _ascii_compatible(charset: str) -> bool:
    try:
        name = codecs.lookup(charset).name
        return not name.startswith(_STATEFUL) and _PROBE.decode(name) == _PROBE.decode("ascii")
    except (LookupError, UnicodeDecodeError):
        return False


def _decode(raw: bytes, encoding: str) -> bytes:
    if encoding in ("7bit", "8bit", "binary"):
        return raw
    if encoding == "quoted-printable":
        return binascii.a2b_qp(raw)
    if encoding == "base64":
        try:
            return base64.b64decode(raw)
        except (binascii.Error, ValueError) as exc:
            raise Untouched(f"an HTML part whose base64 does not decode: {exc}") from None
    raise Untouched(f"an HTML part in the transfer encoding {encoding!r}")


def _encode(octets: bytes, encoding: str, was: bytes) -> bytes:
    """The changed part's body in its transfer encoding, ending as it ended."""
    if encoding == "quoted-printable":
        encoded = binascii.b2a_qp(octets, istext=True)
        return encoded if b"\r\n" in octets or b"\n" not in encoded else encoded.replace(b"\n", b"\r\n")
    if encoding == "base64":
        lines = base64.encodebytes(octets).rstrip(b"\n").replace(b"\n", headers.CRLF)
        return lines + was[len(was.rstrip(b"\r\n")) :]
    return octets
