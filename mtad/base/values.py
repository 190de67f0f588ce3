"""Typed values from configuration text: whole numbers in a range, durations and
sizes. Pure (layer 0): config parses mtad.toml with them, and the modules that
parse their own tables (egress's [pools]) use the same ones, so a duration or a
size is written the same way everywhere. Each raises ValueError with a message
for the operator; the caller names the key. And the "did you mean" of a name
the operator misspelt.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from typing import Any

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^(\d+)\s*(B|KB|KiB|MB|MiB|GB|GiB)?$")
_SIZE_UNITS = {None: 1, "B": 1, "KB": 10**3, "KiB": 2**10, "MB": 10**6, "MiB": 2**20, "GB": 10**9, "GiB": 2**30}


def integer(low: int, high: int) -> Callable[[Any], int]:
    """A parser of whole numbers from low to high."""

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected a whole number, got {value!r}")
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}, got {value}")
        return value

    return parse


def duration(value: Any) -> float:
    """Seconds from a number of seconds or a string such as "250ms", "5m", "1h30m"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and value.strip():
        text = value.strip().replace(" ", "")
        parts = _DURATION_PART.findall(text)
        if "".join(n + u for n, u in parts) != text:
            raise ValueError(f'expected a duration such as "250ms", "30s", "5m", "2h" or "7d", got {value!r}')
        seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    else:
        raise ValueError(f'expected a duration such as "30s", got {value!r}')
    if seconds < 0:
        raise ValueError("a duration must not be negative")
    return seconds


def positive_duration(value: Any) -> float:
    seconds = duration(value)
    if seconds <= 0:
        raise ValueError("must be longer than zero")
    return seconds


def size(value: Any) -> int:
    """Octets from a number or a string such as "25MiB", "10MB", "512KiB"."""
    if isinstance(value, int) and not isinstance(value, bool):
        octets = value
    elif isinstance(value, str) and (match := _SIZE.match(value.strip())):
        octets = int(match.group(1)) * _SIZE_UNITS[match.group(2)]
    else:
        raise ValueError(f'expected a size such as 26214400, "25MiB" or "10MB", got {value!r}')
    if octets <= 0:
        raise ValueError("a size must be larger than zero")
    return octets


def closest(word: str, options: Iterable[str]) -> str | None:
    """The option most like `word` (difflib's ratio of at least 0.6), if one is."""
    found = difflib.get_close_matches(word, list(options), n=1)
    return found[0] if found else None


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the option most like `word`, else ''."""
    close = closest(word, options)
    return f" (did you mean {close!r}?)" if close is not None else ""
