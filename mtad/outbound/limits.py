"""The shaping limits of a receiving provider, as configured in mtad/tables/providers.toml.

Pure data, parsed once at load. Routing attaches a provider's limits to every
route; shaping runs one AIMD token bucket per (provider group, source address)
within them: it starts at `rate`, halves towards `min_rate` when the receiver
says slow down, and climbs by `step` towards `max_rate` after `increase_after`
deliveries in a row. `sessions` caps the attempts in flight the same way.

Rates are written as "10/s", "600/min" or "36000/h" and become messages per
second; "unlimited" is a bucket that never waits for a token (its session cap
still applies, and still adapts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

UNLIMITED = math.inf
_PER = {"s": 1.0, "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hour": 3600.0,
        "d": 86400.0, "day": 86400.0}  # fmt: skip
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*([a-z]+)\s*")


@dataclass(frozen=True, slots=True)
class Limits:
    rate: float  # messages per second a bucket starts at, across all nodes (inf: unlimited)
    min_rate: float  # the floor a decrease stops at
    max_rate: float  # the ceiling an increase stops at
    burst: int  # tokens a bucket holds at most: sends allowed back to back after a pause
    sessions: int  # attempts in flight at most (the cap starts here, and never exceeds it)
    min_sessions: int  # the floor a decrease of the session cap stops at
    step: float  # messages per second an increase adds
    factor: float  # what a decrease multiplies the rate by (0 < factor < 1)
    increase_after: int  # deliveries in a row that earn an increase

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.rate)


# Conservative: a domain nobody has told us about gets a few sessions and a slow start.
DEFAULT = Limits(
    rate=2.0, min_rate=1 / 60, max_rate=20.0, burst=10, sessions=5, min_sessions=1,
    step=0.5, factor=0.5, increase_after=50,
)  # fmt: skip

KEYS = ("rate", "min_rate", "max_rate", "burst", "sessions", "min_sessions", "step", "factor", "increase_after")


def parse_rate(value: Any) -> float:
    """'10/s', '600/min', '36000/h', '1000/day' -> messages per second; 'unlimited' -> inf."""
    if value == "unlimited":
        return UNLIMITED
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None or match.group(2) not in _PER:
        raise ValueError(f'expected a rate such as "10/s", "600/min", "36000/h" or "unlimited", got {value!r}')
    return float(match.group(1)) / _PER[match.group(2)]


def show_rate(rate: float) -> str:
    """Messages per second as the configuration writes them."""
    if math.isinf(rate):
        return "unlimited"
    if rate >= 1:
        return f"{rate:g}/s"
    return f"{rate * 60:.3g}/min" if rate * 60 >= 1 else f"{rate * 3600:.3g}/h"


def parse(table: Mapping[str, Any], base: Limits, where: str, problems: list[str]) -> Limits:
    """The limits in `table` (keys of KEYS; others are left to the caller), each absent
    key taken from `base`. Every problem is appended to `problems`, naming its key."""
    values: dict[str, Any] = {}
    for key in ("rate", "min_rate", "max_rate", "step"):
        if key in table:
            try:
                values[key] = parse_rate(table[key])
            except ValueError as exc:
                problems.append(f"{where} {key}: {exc}")
    for key in ("burst", "sessions", "min_sessions", "increase_after"):
        if key in table:
            value = table[key]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"{where} {key}: expected a whole number of at least 1, got {value!r}")
            else:
                values[key] = value
    if "factor" in table:
        factor = table["factor"]
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 0 < factor < 1:
            problems.append(f"{where} factor: expected a number between 0 and 1 (exclusive), got {factor!r}")
        else:
            values["factor"] = float(factor)
    limits = replace(base, **values)
    if math.isinf(limits.min_rate) or limits.min_rate <= 0:
        problems.append(f"{where} min_rate: expected a finite rate above zero, got {show_rate(limits.min_rate)}")
    elif limits.unlimited and not math.isinf(limits.max_rate):
        problems.append(f'{where} max_rate: an unlimited rate needs max_rate = "unlimited"')
    elif not limits.min_rate <= limits.rate <= limits.max_rate:
        problems.append(
            f"{where} rate: expected min_rate <= rate <= max_rate, got {show_rate(limits.min_rate)} <= "
            f"{show_rate(limits.rate)} <= {show_rate(limits.max_rate)}"
        )
    if limits.min_sessions > limits.sessions:
        problems.append(
            f"{where} min_sessions: expected at most sessions ({limits.sessions}), got {limits.min_sessions}"
        )
    if math.isinf(limits.step):
        problems.append(f"{where} step: expected a finite rate")
    return limits
