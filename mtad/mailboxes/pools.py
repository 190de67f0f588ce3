"""The [account_pools.NAME] tables of mtad.toml, parsed into PoolSettings; the relay's
settings (relay.Settings) that hold them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mtad.base import settings, values
from mtad.mailboxes import accounts
from mtad.mailboxes import settings as mailboxes_settings

# An account whose health (0-100) is below this rests: its bounces and complaints
# outweigh its sends (health 50 is as many of them as sends, plus one).
HEALTH_FLOOR = 50
# Seconds a send whose outcome is unknown is looked for in its account's Sent folder
# before it is sent again: Gmail and Microsoft 365 file a message sent over SMTP
# there within seconds of their 250 (Microsoft's, under load, a minute or two), so
# one not there after ten minutes was most likely never accepted.
SENT_CHECK_AFTER = 600.0
ON_UNKNOWN = ("hold", "resend")  # what becomes of a send whose outcome is unknown when no inbox is read

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
    "on_unknown": values.choice(*ON_UNKNOWN),
}


def _check(name: str) -> None:
    if not accounts.POOL.match(name):
        raise ValueError("a pool name is 1-64 letters, digits, '.', '_' and '-'")


def parse(table: Any, problems: list[str]) -> dict[str, PoolSettings]:
    """The [account_pools.NAME] tables: whether the pool rewrites From, the limits
    `mtad accounts add` gives its accounts when it is not told, the CA file its
    smarthosts are verified against, the health below which an account rests, and
    what becomes of a send whose outcome is unknown (all optional). Every problem is
    appended to `problems`; only pools without one are returned."""
    if not isinstance(table, dict):
        problems.append("[account_pools]: expected tables such as [account_pools.outreach]")
        return {}
    found: dict[str, PoolSettings] = {}
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
            found[name] = PoolSettings(parsed.get("rewrite_from", False), limits, str(zone),
                                             parsed.get("ca_file"),
                                             parsed.get("health_floor", HEALTH_FLOOR),
                                             parsed.get("sent_check_after", SENT_CHECK_AFTER),
                                             parsed.get("on_unknown", "hold"))  # fmt: skip
    return found


@dataclass(frozen=True, slots=True)
class PoolSettings:
    """[account_pools.NAME]: how mail relayed through the pool is sent."""

    rewrite_from: bool = False  # From and the envelope sender become the account's address
    # What `mtad accounts add` gives an account of the pool that it is not told.
    defaults: accounts.Limits = field(default_factory=accounts.Limits)
    time_zone: str = "UTC"
    ca_file: Path | None = None  # only its CAs are trusted for the smarthosts and token endpoints
    health_floor: int = HEALTH_FLOOR  # an account whose health (0-100) is below it rests; 0: never
    # A send that may have gone out: looked for in the account's Sent folder this long
    # (when its inbox is read); else held until an operator retries it ("hold") or
    # sent again at once ("resend", duplicates accepted).
    sent_check_after: float = SENT_CHECK_AFTER
    on_unknown: str = "hold"


_ACCOUNTS = mailboxes_settings.Accounts()


@dataclass(frozen=True, slots=True)
class Settings:
    pools: Mapping[str, PoolSettings] = field(default_factory=dict)
    cooldown: float = _ACCOUNTS.cooldown  # a throttled account rests this long
    gmail_cooldown: float = _ACCOUNTS.gmail_cooldown  # ... and this long when Gmail throttled it
    breaker: accounts.Breaker = field(default_factory=accounts.Breaker)
    poll: float = 5.0  # the longest a paused pool waits before it looks again (an operator may act)
    hand_back_after: float = _ACCOUNTS.hand_back_after  # mail that would wait longer goes back to the spool
    ca_file: Path | None = None  # [tls] ca_file: for a pool that names none (None: the system's trust store)

    def ca_file_of(self, pool: str) -> Path | None:
        """The CA file the pool's smarthosts are verified against (None: the system's store)."""
        settings = self.pools.get(pool)
        return settings.ca_file if settings is not None and settings.ca_file is not None else self.ca_file
