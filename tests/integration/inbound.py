"""The inbound listener for the integration tests: listening, a delivered message to
report on, and a report sent to it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mtad import db
from mtad.base.endpoints import HostPort
from mtad.feedback import inbound
from mtad.feedback.inbound import Inbound
from mtad.feedback.verp import Verp
from tests.integration.delivering import accept, deliveries, new_message
from tests.pg import query
from tests.smtpclient import RawClient

VERP = Verp("bounces.example.org", b"k" * 32)
COMPLAINTS = "fbl@example.org"


@contextlib.asynccontextmanager
async def listening(database: db.Database, **overrides: Any) -> AsyncIterator[Inbound]:
    fields: dict[str, Any] = {"listen": (HostPort("127.0.0.1", 0),), "bounce_domain": VERP.domain,
                              "complaints": COMPLAINTS, "hostname": "mtad.test", **overrides}  # fmt: skip
    listener = Inbound(inbound.Settings(**fields), database, VERP)
    await listener.start()
    try:
        yield listener
    finally:
        await listener.stop()


async def delivered(database: db.Database, *recipients: str) -> tuple[str, dict[str, int]]:
    """A message accepted and recorded as delivered: its Message-ID and its deliveries' ids."""
    message = new_message(*recipients)
    await accept(database, message)
    await query(database, "UPDATE deliveries SET state = 'delivered' WHERE message = $1", message.id)
    return message.message_id, {r: int(str(d["id"])) for r, d in (await deliveries(database)).items()}


async def send(listener: Inbound, recipient: str, raw: bytes, *, sender: str = "") -> str:
    """One message over SMTP from <sender> (<> by default); returns the reply to DATA."""
    client = await RawClient.connect("127.0.0.1", listener.addresses[0].port)
    try:
        await client.ehlo()
        await client.envelope(sender, recipient)
        return await client.data(raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") + b".\r\n")
    finally:
        await client.close()
