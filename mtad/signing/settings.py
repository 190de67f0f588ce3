"""[dkim]: key rotation and signing, declared (mtad.base.settings)."""

from __future__ import annotations

from dataclasses import dataclass

from mtad.base import values
from mtad.base.settings import key

CANONICALIZATIONS = ("relaxed/relaxed", "relaxed/simple", "simple/relaxed", "simple/simple")
# auto: a quarter of the CPU cores, at least 1 (an RSA signature is about as much CPU
# as the rest of a message's delivery).
process_count = values.count_or_auto(64, lambda cores: max(1, cores // 4))


@dataclass(frozen=True, slots=True)
class Dkim:
    overlap: float = key(values.positive_duration, "7d", "How long a retiring key's record stays published.")
    rotate_every: float | None = key(values.optional_duration, "", "A successor after this long; empty: never.")
    check_interval: float = key(values.positive_duration, "1m", "Between looks at DNS for keys to move on.")
    canonicalization: str = key(values.choice(*CANONICALIZATIONS), "relaxed/relaxed", "c= of the signatures.")
    processes: int = key(process_count, "auto", "Processes making RSA signatures (0: on the event loop).")


_DKIM = Dkim(processes=0)


@dataclass(frozen=True, slots=True)
class Rotation:
    """[dkim]'s rotation keys (their defaults are the declared ones)."""

    overlap: float = _DKIM.overlap  # seconds a retiring key's record stays published
    rotate_every: float | None = _DKIM.rotate_every  # seconds an active key signs before a successor is made
    check_interval: float = _DKIM.check_interval
