"""What a package hands the daemon to run on a node: each `Loop` becomes one task of
the daemon's TaskGroup, named, cancelled when the node stops."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

Loop = tuple[str, Callable[[], Coroutine[Any, Any, None]]]  # a task's name, and what it runs
