"""The delivery engine in one process for the integration tests: the test zone and the
shipped tables, messages accepted, an engine at the sink, what the spool says of each
delivery."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from mtad import db
from mtad.deliver import delivery, egress, shaping
from mtad.deliver import settings as deliver_settings
from mtad.outbound import outcomes, routing, sessions
from mtad.signing import dkim
from mtad.spool import commit
from tests.integration import spooling
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

PROVIDERS = routing.load_providers(Path(__file__).parents[1] / "providers.toml")
RULES = outcomes.load_rules(deliver_settings.shipped_table("replies"))
ZONE = """
sink.test.        MX 10 mx1.sink.test.
sink.test.        MX 20 mx2.sink.test.
mx1.sink.test.    A  127.0.0.2
mx2.sink.test.    A  127.0.0.3
other.test.       MX 10 mx.other.test.
mx.other.test.    A  127.0.0.3
nullmx.test.      MX 0 .
down.test.        MX 10 mx.down.test.
mx.down.test.     A  127.0.0.9
"""


def engine(database: db.Database, sink: Sink, pools: egress.Egress | None = None, shaper: shaping.Shaper | None = None,
           *, node: str = "n1", now: Callable[[], datetime] | None = None, signer: dkim.Signer | None = None,
           providers: routing.Providers = PROVIDERS, **kw: object) -> delivery.Delivery:  # fmt: skip
    """An engine delivering to the sink through the test zone, retrying after a minute; `pools`:
    the source addresses it sends from (none: the host's own)."""
    resolver = ZoneResolver(ZONE, servfail={"broken.test"})
    router = routing.Router(resolver, providers, port=sink.port)
    pool = sessions.Pool(sessions.Settings(port=sink.port, ehlo_hostname="mtad.test"))
    settings = delivery.Settings(node=node, retry=outcomes.RetrySchedule((60,), jitter=0), **kw)  # type: ignore[arg-type]
    return delivery.Delivery(settings, database, router, pool, RULES, now=now or (lambda: datetime.now(UTC)),
                             signer=signer, shaper=shaper, pools=pools)  # fmt: skip


def new_message(*recipients: str, body: bytes = b"Subject: t\r\n\r\nhello\r\n") -> commit.NewMessage:
    return spooling.message(*recipients, body=body)


async def accept(database: db.Database, *messages: commit.NewMessage) -> None:
    async with spooling.running(commit.GroupCommitter(database)) as committer:
        for m in messages:
            await committer.commit(m)


async def deliveries(database: db.Database) -> dict[str, dict[str, object]]:
    rows = await query(database, "SELECT * FROM deliveries ORDER BY id")
    return {r["recipient"]: dict(r) for r in rows}
