"""Sending mailboxes behind a smarthost process, and `mtad run` nodes that relay through them."""

from __future__ import annotations

import smtplib
from email.policy import SMTP
from pathlib import Path
from typing import Any

from mtad import db
from mtad.base import vault
from mtad.mailboxes import accounts
from tests.mail import email
from tests.pg import run_sync
from tests.running import Mtad
from tests.smarthost import Smarthost

DELIVERY = 'enabled = true\npoll_interval = "250ms"\nlease_duration = "10s"\nshutdown_timeout = "10s"'


def submit(node: Mtad, messages: range, recipients: int = 1) -> None:
    with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
        for i in messages:
            message = email(f"relayed {i}")
            message["X-Mtad-Account-Pool"] = "outreach"
            to = [f"r{i}-{n}@example.net" for n in range(recipients)]
            client.sendmail("app@example.org", to, message.as_bytes(policy=SMTP))


class Rig:
    """A smarthost process, its mailboxes in the database, and `mtad run` nodes that
    trust its certificate through the pool's ca_file (no SSL_CERT_FILE)."""

    def __init__(self, factory: Any, dsn: str, tls_files: tuple[Path, Path], tmp_path: Path) -> None:
        self.factory, self.dsn, self.tls_files, self.tmp_path = factory, dsn, tls_files, tmp_path
        self.key = vault.Vault.new_key()
        (tmp_path / "accounts.key").write_bytes(self.key)

    def smarthost(self, names: list[str], **options: Any) -> Smarthost:
        logins = {f"{name}@example.com": f"pw-{name}" for name in names}
        return Smarthost(*self.tls_files, logins, **options).start()

    def node(self, n: int, pool: str = "") -> Mtad:
        """Node relay-N; `pool`: more keys of [account_pools.outreach]."""
        extra = (f'[accounts]\nkey_file = "{self.tmp_path / "accounts.key"}"\n'
                 f'[account_pools.outreach]\nca_file = "{self.tls_files[0]}"\n{pool}\n')  # fmt: skip
        return self.factory(f'dsn = "{self.dsn}"', extra, delivery=DELIVERY, node=f"relay-{n}")


def add_accounts(dsn: str, key: bytes, port: int, names: list[str], **limits: Any) -> None:
    sealer = vault.Vault(key)

    async def add() -> None:
        database = await db.Database.connect(dsn, max_size=2)
        try:
            for name in names:
                account = accounts.Account(name=name, address=f"{name}@example.com", pool="outreach",
                                           host="localhost", port=port, login=f"{name}@example.com",
                                           limits=accounts.Limits(**limits))  # fmt: skip
                await accounts.add(database, account)
                await accounts.set_secret(database, name, sealer.seal(vault.Secret(f"pw-{name}")))
        finally:
            await database.close()

    run_sync(add)
