"""A submission server on the test's own event loop, with its group committer, routing
through a zone of its own."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from mtad import db, submission
from mtad.base.endpoints import HostPort
from mtad.feedback import suppression
from mtad.outbound import routing
from mtad.spool import commit, quotas, tenants
from tests.integration import delivering
from tests.zones import ZoneResolver


@dataclasses.dataclass
class Submission:
    server: submission.Server
    committer: commit.GroupCommitter
    database: db.Database
    gate: quotas.Gate

    @property
    def port(self) -> int:
        return self.server.addresses[0].port


ZONE = """
example.com.              A  192.0.2.1
xn--bcher-kva.example.    A  192.0.2.2
undeliverable.test.       MX 0 .
"""


@contextlib.asynccontextmanager
async def submission_server(
    database: db.Database, tls: tuple[Path, Path] | None = None, **overrides: Any
) -> AsyncIterator[Submission]:
    fields: dict[str, Any] = {"listen": (HostPort("127.0.0.1", 0),), "hostname": "mtad.test", **overrides}
    if tls is not None:
        fields["tls_cert"], fields["tls_key"] = tls
    settings = submission.Settings(**fields)
    committer = commit.GroupCommitter(database, window=0.001)
    context = submission.tls_context(*tls) if tls else None
    router = routing.Router(ZoneResolver(ZONE, servfail={"dnsdown.test"}), delivering.PROVIDERS)
    quota = {t: d.quota for t, d in settings.tenant_defaults.items()}
    gate = quotas.Gate(database, tenants.States(database), quota, settings.default_quota)
    await gate.refresh()
    handler = submission.Handler(settings, committer, tenants.Authenticator(database), router=router,
                                 suppressions=suppression.Checker(database), gate=gate)  # fmt: skip
    server = submission.Server(settings, handler, context)
    task = asyncio.create_task(committer.run())
    await server.start()
    try:
        yield Submission(server, committer, database, gate)
    finally:
        server.stop_accepting()
        await server.close_sessions()
        committer.close()
        await task


Factory = Callable[..., contextlib.AbstractAsyncContextManager[Submission]]
