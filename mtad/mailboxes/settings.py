"""[accounts]: the sending accounts' key and what a reply does to an account,
declared (mtad.base.settings)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mtad.base import values
from mtad.base.settings import key


@dataclass(frozen=True, slots=True)
class Accounts:
    key_file: Path | None = key(values.optional_path, "", "The key that seals account secrets, DKIM keys, webhooks.")
    key_env: str | None = key(values.optional_string, "", "Else the environment variable that holds it.")
    cooldown: float = key(values.positive_duration, "60m", "A throttled account rests this long.")
    gmail_cooldown: float = key(values.positive_duration, "4h", "... or this long when Google throttled it.")
    hand_back_after: float = key(values.positive_duration, "1m", "Mail that would wait longer goes back to the spool.")
    breaker_failures: int = key(values.integer(1, 10_000), 5, "An account's failures in breaker_window that trip it.")
    breaker_window: float = key(values.positive_duration, "30m", "The breaker's window.")
    breaker_min_successes: int = key(values.integer(0, 1_000_000), 10, "Sends the system confirmed, else no trip.")
    trip_duration: float = key(values.positive_duration, "30m", "How long a trip lasts.")
    trips_to_disconnect: int = key(values.integer(1, 100), 2, "The trip in a day that disconnects the account.")
    make: bool = False  # key_file is mtad's own (embedded database, no key named): made when missing
