"""The admin API served on loopback for the integration tests, and a client of it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from mtad import db, submission
from mtad.admin import api, names
from mtad.base.endpoints import HostPort
from mtad.base.http import Listener
from mtad.feedback import reputation, suppression
from mtad.spool import commit, quotas, tenants
from tests.integration.mailboxes import SEALER

TOKEN = "t0ken-of-the-admin-api-0123456789"
CONFIGURED = names.Configured(
    pools={"bulk": ("127.0.0.10", "127.0.0.11"), "transactional": ("127.0.0.12",)},
    account_pools=frozenset({"outreach"}),
    groups=frozenset({"google", "microsoft", "accounts:outreach"}),
)


class Client:
    def __init__(self, session: aiohttp.ClientSession, base: str, gate: quotas.Gate) -> None:
        self.session = session
        self.base = base
        self.gate = gate

    async def call(self, method: str, path: str, *, token: str | None = TOKEN, **kw: Any) -> tuple[int, Any]:
        headers = {**kw.pop("headers", {}), **({"Authorization": f"Bearer {token}"} if token else {})}
        async with self.session.request(method, self.base + path, headers=headers, **kw) as response:
            return response.status, await response.json()


@contextlib.asynccontextmanager
async def serving(database: db.Database, **settings: Any) -> AsyncIterator[Client]:
    sub = submission.Settings(hostname="mtad.test", check_recipient_domains=False, **settings)
    committer = commit.GroupCommitter(database, window=0.001)
    gate = quotas.Gate(database, tenants.States(database), {t: d.quota for t, d in sub.tenant_defaults.items()})
    await gate.refresh()
    acceptor = submission.Acceptor(sub, committer, gate, suppressions=suppression.Checker(database))

    def limits(tenant: str) -> tuple[quotas.Quota, reputation.Guard]:
        found = sub.tenant_defaults.get(tenant)
        return (found.quota if found else quotas.NONE), reputation.Guard()

    services = api.Services(database, TOKEN, acceptor, "default", limits, 30.0, SEALER, configured=lambda: CONFIGURED)
    listener = Listener(api.application(services))
    await listener.start([HostPort("127.0.0.1", 0)])
    task = asyncio.create_task(committer.run())
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(session, f"http://127.0.0.1:{listener.addresses[0].port}", gate)
    finally:
        await listener.stop()
        committer.close()
        await task
