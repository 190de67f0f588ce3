"""Reserve before send across processes: several `mtad run` nodes sharing one
database relay mail through 60 sending accounts at a smarthost sink, and no
account ever sends inside its gap or beyond its cap, as timed by the sink."""

from __future__ import annotations

import collections
import itertools
import os
import smtplib
from datetime import UTC, datetime
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from mtad import db
from mtad.base import vault
from mtad.mailboxes import accounts
from mtad.submission import tls_context
from tests.acceptance.mailboxes import add_accounts
from tests.mail import email
from tests.pg import run_sync
from tests.running import Mtad
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow

NODES = 3
ACCOUNTS = 60
MESSAGES = 660
GAP = 2.0  # seconds between two sends of one account
CAP = 11  # sends a day: 660 messages fill every account's day exactly


def reservations(dsn: str) -> dict[str, int]:
    async def fetch() -> dict[str, int]:
        database = await db.Database.connect(dsn, max_size=1)
        try:
            now = datetime.now(UTC)
            return {use.account.name: use.today for use in await accounts.usage(database, now)}
        finally:
            await database.close()

    return run_sync(fetch)


@pytest.mark.serial
def test_several_nodes_keep_every_account_inside_its_gap_and_cap(
    mtad_factory: Any, dsn: str, tls_files: tuple[Path, Path], tmp_path: Path
) -> None:
    logins = {f"box{i:02d}@example.com": f"pw-box{i:02d}" for i in range(ACCOUNTS)}
    key = vault.Vault.new_key()
    (tmp_path / "accounts.key").write_bytes(key)
    trusting = {**os.environ, "SSL_CERT_FILE": str(tls_files[0])}  # the smarthost's self-signed certificate
    with ThreadedSink(("127.0.0.1",), tls=tls_context(*tls_files), logins=logins) as smarthost:
        add_accounts(dsn, key, smarthost.port, [f"box{i:02d}" for i in range(ACCOUNTS)], daily_cap=CAP, min_gap=GAP)
        extra = f'[accounts]\nkey_file = "{tmp_path / "accounts.key"}"\n[account_pools.outreach]\n'
        delivery = 'enabled = true\npoll_interval = "250ms"\nlease_duration = "10s"\nshutdown_timeout = "10s"'
        nodes: list[Mtad] = [
            mtad_factory(f'dsn = "{dsn}"', extra, env=trusting, delivery=delivery, node=f"relay-{n}").start()
            for n in range(NODES)
        ]
        for n, node in enumerate(nodes):  # each node accepts a third, and any node may send any of it
            with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
                for i in range(n, MESSAGES, NODES):
                    message = email(f"relayed {i}")
                    message["X-Mtad-Account-Pool"] = "outreach"
                    client.sendmail("app@example.org", [f"r{i}@example.net"], message.as_bytes(policy=SMTP))
        received = smarthost.wait_for(MESSAGES, within=180)
        for node in nodes:
            assert node.stop() == 0
    by_account: dict[str, list[float]] = collections.defaultdict(list)
    for message in received:
        assert message.login is not None
        by_account[message.login].append(message.at)
    assert len(received) == MESSAGES
    assert {login: len(times) for login, times in by_account.items()} == dict.fromkeys(logins, CAP)
    closest = min(b - a for times in by_account.values() for a, b in itertools.pairwise(sorted(times)))
    assert closest >= GAP, f"two sends of one account {closest:.3f}s apart"
    assert reservations(dsn) == {login.split("@")[0]: CAP for login in logins}
    senders = [sum(1 for r in node.events("delivered")) for node in nodes]
    assert sum(senders) == MESSAGES
    assert sum(1 for sent in senders if sent) >= 2, senders  # the nodes really shared the work
