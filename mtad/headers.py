"""Read and add the few message headers the accept path needs, on bytes.

The accept path never parses the whole message with the email package (that
costs ~0.5 ms per message and cut accept throughput 2.7x); it scans the header
block as bytes. Sync, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

CRLF = b"\r\n"
# One header field: a name, a colon, the value with its folded continuation lines.
_FIELD = re.compile(rb"^([!-9;-~]+)[ \t]*:([^\r\n]*(?:\r\n[ \t][^\r\n]*)*)", re.MULTILINE)


def has_bare_line_ending(data: bytes) -> bool:
    """True when data has a CR not followed by LF, or an LF not preceded by CR.

    Together with DATA ending only on CRLF.CRLF, refusing these closes the SMTP
    smuggling family of attacks (a `\\n.\\r\\n` that another server would take
    for the end of data). Three C counts: ~15x faster than a regex with
    look-arounds on a 20 KB message.
    """
    pairs = data.count(CRLF)
    return data.count(b"\r") != pairs or data.count(b"\n") != pairs


def header_end(data: bytes) -> int:
    """Offset just past the CRLF of the last header line (before the blank line)."""
    if data.startswith(CRLF):
        return 0
    blank = data.find(b"\r\n\r\n")
    if blank < 0:
        return len(data)
    return blank + 2


def find(header_block: bytes, names: Iterable[bytes]) -> dict[bytes, bytes]:
    """The first value of each wanted header (lower-case names), unfolded and stripped."""
    wanted = {n.lower() for n in names}
    found: dict[bytes, bytes] = {}
    for match in _FIELD.finditer(header_block):
        name = match.group(1).lower()
        if name in wanted and name not in found:
            found[name] = re.sub(rb"\r\n[ \t]", b" ", match.group(2)).strip()
            if len(found) == len(wanted):
                break
    return found


def field(name: str, value: str) -> bytes:
    """A header line ready to insert: `Name: value` + CRLF, UTF-8."""
    return f"{name}: {value}".encode() + CRLF


def fold(name: str, parts: list[str]) -> bytes:
    """A header line of several parts, folded before each part after the first."""
    return f"{name}: ".encode() + "\r\n\t".join(parts).encode() + CRLF
