"""A submission server on the test's own event loop, with its group committer."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from mtad import db, submission
from mtad.base.endpoints import HostPort
from mtad.feedback import suppression
from mtad.outbound import routing
from mtad.spool import commit, quotas, tenants
from tests.sink import Sink
from tests.zones import ZoneResolver

TEST_PROVIDERS = routing.load_providers(Path(__file__).parents[1] / "providers.toml")


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
    router = routing.Router(ZoneResolver(ZONE, servfail={"dnsdown.test"}), TEST_PROVIDERS)
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


@pytest.fixture
def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


Factory = Callable[..., contextlib.AbstractAsyncContextManager[Submission]]


@pytest.fixture
def make_submission(database: db.Database, tls_files: tuple[Path, Path]) -> Factory:
    """make_submission(tls=True, **settings) -> async context manager of a running server."""

    def make(*, tls: bool = False, **overrides: Any) -> contextlib.AbstractAsyncContextManager[Submission]:
        return submission_server(database, tls_files if tls else None, **overrides)

    return make


@pytest.fixture
async def smarthost(tls_files: tuple[Path, Path]) -> AsyncIterator[Sink]:
    """A smarthost on 127.0.0.1 (its certificate is for "localhost"): AUTH required after
    STARTTLS, no logins yet (tests add them)."""
    started = await Sink(("127.0.0.1",), tls=submission.tls_context(*tls_files), logins={}).start()
    yield started
    await started.stop()


@pytest.fixture
async def sink() -> AsyncIterator[Sink]:
    """An SMTP sink on 127.0.0.2 and 127.0.0.3 (the test zone's MX hosts)."""
    started = await Sink(("127.0.0.2", "127.0.0.3")).start()
    yield started
    await started.stop()
