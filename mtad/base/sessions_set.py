"""An aiosmtpd server session that keeps itself in a set while it is connected, so
that its server can close what is still open when it stops (the sink, the inbound
listener)."""

from __future__ import annotations

import asyncio
from typing import Any

from aiosmtpd.smtp import SMTP


class Tracked(SMTP):
    """aiosmtpd's SMTP, in `sessions` from connection to disconnection."""

    def __init__(self, handler: Any, sessions: set[Tracked], **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._sessions = sessions

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._sessions.add(self)
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        self._sessions.discard(self)
        super().connection_lost(error)
