"""A resolver answering from zone text, behind routing.Resolver (unit tests).

    example.com.      300 MX 10 mx1.example.com.
    mx1.example.com.  300 A  127.0.0.2

Names are absolute; the TTL is optional (300). Names listed in `servfail`
fail transiently. Answers about the names in `secure` (every name: True) come
with the AD bit, as from a validating resolver. An existing name without records of the asked type answers
empty with the negative TTL; a name that does not exist answers NXDOMAIN.
"""

from __future__ import annotations

from collections import defaultdict

from mtad.base import errors
from mtad.outbound.routing import Records


class ZoneResolver:
    def __init__(
        self,
        text: str,
        *,
        servfail: set[str] | None = None,
        negative_ttl: float = 60.0,
        secure: set[str] | bool = False,
    ) -> None:
        self.secure = secure if isinstance(secure, bool) else {n.rstrip(".").lower() for n in secure}
        self.records: dict[tuple[str, str], list[tuple[str, float]]] = defaultdict(list)
        self.names: set[str] = set()
        self.servfail = {n.rstrip(".").lower() for n in servfail or set()}
        self.negative_ttl = negative_ttl
        self.queries: list[tuple[str, str]] = []
        for raw in text.splitlines():
            line = _uncommented(raw).strip()
            if not line:
                continue
            fields = line.split()
            name = fields.pop(0).rstrip(".").lower()
            ttl = float(fields.pop(0)) if fields[0].isdigit() else 300.0
            rdtype = fields.pop(0).upper()
            self.records[(name, rdtype)].append((" ".join(fields), ttl))
            self.names.add(name)

    async def lookup(self, name: str, rdtype: str) -> Records:
        name = name.rstrip(".").lower()
        self.queries.append((name, rdtype))
        if name in self.servfail:
            raise errors.RouteTempFail(f"{rdtype} {name}: SERVFAIL")
        found = self.records.get((name, rdtype))
        secure = self.secure if isinstance(self.secure, bool) else name in self.secure
        if found:
            return Records(tuple(v for v, _ in found), min(t for _, t in found), secure=secure)
        return Records((), self.negative_ttl, nxdomain=name not in self.names, secure=secure)


def _uncommented(line: str) -> str:
    """The line up to a ";" that starts a comment (one inside a quoted string does not)."""
    quoted = False
    for index, char in enumerate(line):
        if char == '"':
            quoted = not quoted
        elif char == ";" and not quoted:
            return line[:index]
    return line
