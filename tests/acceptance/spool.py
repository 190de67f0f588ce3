"""What a running mtad writes to the spool in its own time, waited for."""

from __future__ import annotations

import json
from typing import Any

from tests import pg, waiting


def checkpointed(dsn: str, group: str) -> None:
    """Wait until a node has checkpointed a bucket of `group` (each does every few seconds)."""
    waiting.eventually(lambda: pg.rows(dsn, "SELECT 1 FROM buckets WHERE route_group = $1", group))


def set_aside(dsn: str, recipient: str, kind: str) -> None:
    """Wait until a node set the recipient's delivery aside for a suspension of `kind`."""

    def requeued() -> list[dict[str, Any]]:
        return pg.rows(dsn, "SELECT e.data FROM events e JOIN deliveries d ON d.id = e.delivery "
                            "WHERE e.kind = 'requeued' AND d.recipient = $1", recipient)  # fmt: skip

    waiting.eventually(requeued, lambda found: any(json.loads(r["data"]).get("suspended") == kind for r in found))
