"""Waiting for what mtad does in its own time, where it offers nothing to wait on
(a row another process writes, a command's output): look at the thing itself
again and again, bounded, and fail naming the last thing seen.

What does offer a wait is waited on instead: `Mtad.wait_for_log`, the sinks'
`wait_for`, a Condition."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

WITHIN = 30.0  # seconds: far above what any of these takes on a loaded machine


def eventually(
    look: Callable[[], T],
    holds: Callable[[T], Any] = bool,
    *,
    within: float = WITHIN,
    every: float = 0.1,
    show: Callable[[], object] | None = None,
) -> T:
    """look() every `every` seconds until holds(what it returned); returns that.
    Raises AssertionError after `within` seconds with the last value seen (and
    what show() returns then, such as the daemon's last lines)."""
    deadline = time.monotonic() + within
    while not holds(seen := look()):
        if time.monotonic() >= deadline:
            raise _gave_up(look, seen, within, show)
        time.sleep(every)
    return seen


async def eventually_async(
    look: Callable[[], Awaitable[T]], holds: Callable[[T], Any] = bool, *, within: float = WITHIN, every: float = 0.05
) -> T:
    """eventually() for a test on an event loop: `look` is awaited, and the loop runs
    the code under test between two looks."""
    deadline = time.monotonic() + within
    while not holds(seen := await look()):
        if time.monotonic() >= deadline:
            raise _gave_up(look, seen, within)
        await asyncio.sleep(every)
    return seen


def _gave_up(
    look: Callable[..., Any], seen: object, within: float, show: Callable[[], object] | None = None
) -> AssertionError:
    shown = f"\n{show()}" if show is not None else ""
    return AssertionError(f"{getattr(look, '__qualname__', look)} still gave {seen!r} after {within:g} s{shown}")
