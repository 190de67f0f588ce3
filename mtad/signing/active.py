"""The active DKIM keys, whichever node made them active, loaded into the signer: at
start (before the first send), every RELOAD_EVERY seconds, and when rotation moved one."""

from __future__ import annotations

import asyncio

import structlog

from mtad import db
from mtad.base import errors, vault
from mtad.signing import dkim

log = structlog.get_logger("mtad.signing")

RELOAD_EVERY = 60.0  # seconds between reads of the active keys (a key made active anywhere signs soon)


class ActiveKeys:
    def __init__(self, database: db.Database, signer: dkim.Signer, sealer: vault.Vault) -> None:
        self._db = database
        self._signer = signer
        self._sealer = sealer

    async def load(self) -> None:
        """The active keys into the signer; on a failure the keys loaded before stay."""
        try:
            keys = await dkim.load(self._db, self._sealer)
        except (errors.SpoolError, errors.ConfigError) as exc:
            log.warning("dkim_keys_not_loaded", error=str(exc))
            return
        before = {(k.domain, k.selector) for found in self._signer.keys.values() for k in found}
        self._signer.replace(keys)
        await self._signer.start()  # its workers, when an RSA key is active: not at the first message
        now = {(k.domain, k.selector) for k in keys}
        if now != before:
            log.info("dkim_keys", active=sorted(f"{d}/{s}" for d, s in now))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(RELOAD_EVERY)
            await self.load()
