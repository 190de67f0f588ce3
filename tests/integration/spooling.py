"""Messages into the spool for the integration tests: one made up, a group committer
running, messages accepted at a fixed time, the fast path's receiving end."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

from mtad import db
from mtad.base import envelope
from mtad.base.lifecycle import Reason, State
from mtad.base.replies import Reply
from mtad.spool import commit, leases

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)  # the tests' fixed "now"


def message(
    *recipients: str, tenant: str = "t1", key: str | None = None, body: bytes = b"Subject: x\r\n\r\nhi\r\n"
) -> commit.NewMessage:
    queue_id = commit.new_queue_id()
    return commit.NewMessage(
        id=queue_id,
        tenant=tenant,
        sender="app@example.org",
        recipients=tuple(envelope.parse_mailbox(r) for r in recipients or ("a@example.com",)),
        message_id=f"<{queue_id.hex}@test>",
        idempotency_key=key,
        body=body,
        client_address="127.0.0.1",
        received_at=datetime.now(UTC),
    )


@contextlib.asynccontextmanager
async def running(committer: commit.GroupCommitter) -> AsyncIterator[commit.GroupCommitter]:
    task = asyncio.create_task(committer.run())
    try:
        yield committer
    finally:
        committer.close()
        await task


async def spool_messages(database: db.Database, *recipients: str, count: int = 1) -> list[uuid.UUID]:
    async with running(commit.GroupCommitter(database, now=lambda: NOW)) as committer:
        accepted = [await committer.commit(message(*recipients)) for _ in range(count)]
    return [a.queue_id for a in accepted]


def outcome(delivery: int, state: State, reason: Reason | None, reply: Reply | None, **kw: object) -> leases.Outcome:
    fields: dict[str, object] = {"tenant": "t1", "next_attempt_at": None, "route_group": "g", "internal": False}
    fields.update(kw)
    return leases.Outcome(delivery, state=state, reason=reason, reply=reply, data={"mx": "mx1"}, **fields)  # type: ignore[arg-type]


class Collector:
    """The fast path's receiving end (a commit.FastPath)."""

    node = "n1"

    def __init__(self) -> None:
        self.deliveries: list[commit.NewDelivery] = []

    def lease_until(self, now: datetime) -> datetime:
        return now + timedelta(minutes=5)

    def has_room(self) -> bool:
        return True

    def accepted(self, deliveries: list[commit.NewDelivery]) -> None:
        self.deliveries.extend(deliveries)
