"""The [account_pools.NAME] tables of mtad.toml, parsed into relay.PoolSettings."""

from __future__ import annotations

from typing import Any

from mtad.base import settings, values
from mtad.mailboxes import accounts, relay

_KEYS = {
    "rewrite_from": "true or false",
    "daily_cap": "a whole number",
    "min_gap": "a duration",
    "jitter": "[low, high] durations",
    "per_second": "a whole number",
    "per_minute": "a whole number",
    "per_hour": "a whole number",
    "time_zone": "an IANA time zone",
    "ca_file": "a PEM file of CA certificates",
    "health_floor": "a whole number from 0 to 100",
    "sent_check_after": "a duration from 1s to 1d",
    "on_unknown": '"hold" or "resend"',
}


def _sent_check_after(value: Any) -> float:
    """How long a send whose outcome is unknown is looked for in its Sent folder: a
    provider files its sent mail within minutes, and past a day the mail is stale."""
    seconds = values.positive_duration(value)
    if not 1 <= seconds <= 86_400:
        raise ValueError(f"expected a duration from 1s to 1d, got {value!r}")
    return seconds


_CAP = values.integer(1, 10_000_000)
_PARSERS = {
    "rewrite_from": values.boolean,
    "daily_cap": _CAP,
    "min_gap": values.duration,
    "jitter": values.duration_pair,
    "per_second": _CAP,
    "per_minute": _CAP,
    "per_hour": _CAP,
    "ca_file": values.ca_file,
    "health_floor": values.integer(0, 100),
    "sent_check_after": _sent_check_after,
    "on_unknown": values.choice(*relay.ON_UNKNOWN),
}


def _check(name: str) -> None:
    if not accounts.POOL.match(name):
        raise ValueError("a pool name is 1-64 letters, digits, '.', '_' and '-'")


def parse(table: Any, problems: list[str]) -> dict[str, relay.PoolSettings]:
    """The [account_pools.NAME] tables: whether the pool rewrites From, the limits
    `mtad accounts add` gives its accounts when it is not told, the CA file its
    smarthosts are verified against, the health below which an account rests, and
    what becomes of a send whose outcome is unknown (all optional). Every problem is
    appended to `problems`; only pools without one are returned."""
    if not isinstance(table, dict):
        problems.append("[account_pools]: expected tables such as [account_pools.outreach]")
        return {}
    found: dict[str, relay.PoolSettings] = {}
    example = "rewrite_from = true, daily_cap = 500"
    for name, where, keys in settings.named_tables(table, "[account_pools.{}]", _check, example, _KEYS, problems):
        before = len(problems)
        parsed: dict[str, Any] = {}
        for key, parse_value in _PARSERS.items():
            if key in keys:
                try:
                    parsed[key] = parse_value(keys[key])
                except ValueError as exc:
                    problems.append(f"{where} {key}: {exc}")
        zone = keys.get("time_zone", "UTC")
        limits = accounts.Limits(parsed.get("daily_cap"), parsed.get("min_gap"), parsed.get("jitter"),
                                 parsed.get("per_second"), parsed.get("per_minute"),
                                 parsed.get("per_hour"))  # fmt: skip
        sample = accounts.Account(name="check", address="a@b", pool=name, host="h", port=1, login="l",
                                  time_zone=str(zone), limits=limits)  # fmt: skip
        problems.extend(f"{where}: {p.split(': ', 1)[1]}" for p in accounts.problems(sample))
        if len(problems) == before:
            found[name] = relay.PoolSettings(parsed.get("rewrite_from", False), limits, str(zone),
                                             parsed.get("ca_file"),
                                             parsed.get("health_floor", relay.HEALTH_FLOOR),
                                             parsed.get("sent_check_after", relay.SENT_CHECK_AFTER),
                                             parsed.get("on_unknown", "hold"))  # fmt: skip
    return found
