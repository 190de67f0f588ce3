"""MTA-STS (RFC 8461): a recipient domain's published TLS policy, as text parsed.

`txt_id()` reads the `_mta-sts.<domain>` TXT records: the id of the policy on
offer, or None when the domain publishes none (no record, several, or one that
does not parse: section 3.1 says to treat all three alike). `parse()` reads the
policy file served at `https://mta-sts.<domain>/.well-known/mta-sts.txt` into a
`Policy`; `Policy.allows(mx)` says whether an MX host name matches one of its
`mx` patterns (section 4.1). Fetching and caching are elsewhere: this module
only reads text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from mtad.base import errors
from mtad.outbound import routing

MAX_POLICY_OCTETS = 64 * 1024  # section 3.3: a larger policy file is refused
MAX_AGE_LIMIT = 31_557_600  # section 3.2: one year, at most

_TXT_FIELD = re.compile(r"^([A-Za-z0-9_.-]+)=([\x21-\x3a\x3c\x3e-\x7e]{1,32})$")  # sts-field (section 3.1)
_VERSION = re.compile(r"^v=STSv1[ \t]*;")
_ID = re.compile(r"^[A-Za-z0-9]{1,32}$")
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


class Mode(StrEnum):
    ENFORCE = "enforce"  # deliver only over verified TLS to a listed MX
    TESTING = "testing"  # deliver as without a policy, report the failures
    NONE = "none"  # the policy is withdrawn


class PolicyError(errors.RemoteError):
    """A policy file that does not parse; the text says why."""


@dataclass(frozen=True, slots=True)
class Policy:
    mode: Mode
    max_age: int  # seconds it may be cached
    mx: tuple[str, ...]  # lower-case patterns: "mx.example.com" or "*.example.com"

    def allows(self, host: str) -> bool:
        """Whether `host` (an MX name) matches a pattern: exactly, or "*." standing for
        one whole leftmost label."""
        name = host.lower().rstrip(".")
        for pattern in self.mx:
            if pattern.startswith("*."):
                label, dot, rest = name.partition(".")
                if dot and label and rest == pattern[2:]:
                    return True
            elif name == pattern:
                return True
        return False


def txt_id(values: Iterable[str]) -> str | None:
    """The policy id of a domain's `_mta-sts` TXT records (their strings joined),
    or None: no record starts with "v=STSv1", several do, or the one that does is
    not valid."""
    records = [text for text in map(routing.txt_text, values) if _VERSION.match(text)]
    if len(records) != 1:
        return None
    fields: dict[str, str] = {}
    for part in records[0].split(";"):
        part = part.strip(" \t")
        if not part:
            continue
        match = _TXT_FIELD.match(part)
        if match is None:
            return None
        fields.setdefault(match.group(1), match.group(2))
    if fields.get("v") != "STSv1" or not _ID.match(fields.get("id", "")):
        return None
    return fields["id"]


def parse(text: bytes) -> Policy:
    """A policy file (section 3.2): "key: value" lines, LF or CRLF, unknown keys
    ignored; raises PolicyError naming what is wrong."""
    if len(text) > MAX_POLICY_OCTETS:
        raise PolicyError(f"the policy is larger than {MAX_POLICY_OCTETS} octets")
    try:
        decoded = text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PolicyError("the policy is not UTF-8") from exc
    values: dict[str, str] = {}
    patterns: list[str] = []
    for line in decoded.split("\n"):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        key, colon, value = line.partition(":")
        if not colon:
            raise PolicyError(f"not a 'key: value' line: {line[:80]!r}")
        key, value = key.strip(), value.strip(" \t")
        if key == "mx":
            patterns.append(_pattern(value))
        else:
            values.setdefault(key, value)
    if values.get("version") != "STSv1":
        raise PolicyError(f"version is {values.get('version')!r}, not 'STSv1'")
    try:
        mode = Mode(values.get("mode", ""))
    except ValueError:
        raise PolicyError(f"mode is {values.get('mode')!r}: expected enforce, testing or none") from None
    age = values.get("max_age", "")
    if not age.isascii() or not age.isdigit() or len(age) > 10:
        raise PolicyError(f"max_age is {age!r}: expected a whole number of seconds")
    if mode is not Mode.NONE and not patterns:
        raise PolicyError(f"mode {mode} names no mx")
    return Policy(mode, min(int(age), MAX_AGE_LIMIT), tuple(patterns))


def _pattern(value: str) -> str:
    pattern = value.lower().rstrip(".")
    labels = pattern.removeprefix("*.").split(".")
    if len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        raise PolicyError(f"mx {value!r} is not a host name or a '*.' pattern")
    return pattern
