"""The health of each source address at each provider: `after` throttling replies
or connection failures in a row (with no delivery in between) make an address
unhealthy there for `cool_off` seconds, and every egress policy leaves it alone
meanwhile. One provider throttling an address says nothing of the others.

Sync, no I/O; an entry per (address, provider) with strikes or a cool-off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(slots=True)
class _State:
    strikes: int = 0  # throttling replies / connection failures in a row
    until: float = -math.inf  # unhealthy until then


class Health:
    """Every (address, provider)'s strikes and cool-off."""

    def __init__(self) -> None:
        self._states: dict[tuple[str, str], _State] = {}

    def unhealthy_until(self, address: str, provider: str, now: float) -> float | None:
        """The end of the address's cool-off at the provider, while it is not over."""
        state = self._states.get((address, provider))
        return state.until if state is not None and state.until > now else None

    def delivered(self, address: str, provider: str, now: float) -> None:
        """A delivery ends the run of strikes (a cool-off runs its course)."""
        key = (address, provider)
        state = self._states.get(key)
        if state is not None:
            state.strikes = 0
            if state.until <= now:
                del self._states[key]

    def strike(self, address: str, provider: str, now: float, *, after: int, cool_off: float) -> bool:
        """A throttling reply, a refusal of the sender or a failed connection; True
        when it made the address unhealthy at the provider (worth a log line)."""
        state = self._states.setdefault((address, provider), _State())
        state.strikes += 1
        if state.strikes >= after:
            state.strikes = 0
            state.until = now + cool_off
            return True
        return False

    def statistics(self, now: float) -> dict[str, dict[str, float]]:
        """address -> provider -> the end of its cool-off, for the cool-offs not over."""
        unhealthy: dict[str, dict[str, float]] = {}
        for (address, provider), state in self._states.items():
            if state.until > now:
                unhealthy.setdefault(address, {})[provider] = state.until
        return unhealthy
