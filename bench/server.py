"""What the two servers under test have in common: started on entry, stopped on exit."""

from __future__ import annotations

from typing import Self


class Managed:
    """A server used as a context manager: `start()` on entry (and `stop()` if that
    fails half-way), `stop()` on exit, even on error."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
