"""The DKIM signatures of outgoing mail: made once per message, header and keys, as
late as the send or a little ahead of it, and kept for a retry.

A message's signatures are cached on it (holdings.Message.signatures), by the
digest of its header block and the ids of the keys: the transactions of one
message share them, and one being made is awaited rather than made twice. They
are stored on the message (migration 0008) only when a retry may need them, that
is when an attempt leaves a recipient deferred: most mail is delivered at the
first attempt, and an UPDATE of its message row would cost more than signing
again. A retry signed with other keys, or after a header change, signs anew. A
tracked tenant's body differs by recipient: its cache is keyed by the whole message.
"""

from __future__ import annotations

import asyncio
import hashlib
import uuid
from dataclasses import dataclass

import structlog

from mtad import db
from mtad.base import errors
from mtad.base.batching import Batcher
from mtad.deliver.holdings import Message
from mtad.signing import dkim

log = structlog.get_logger("mtad.delivery")

Made = tuple[bytes, tuple[int, ...]]  # (header digest, key ids): what a signature was made over, with what


@dataclass(frozen=True, slots=True)
class Signed:
    body: bytes  # the message with its signature fields on top (as it came when unsigned)
    says: str  # for the event: "d=domain s=selector ..." or why it went unsigned
    made: Made | None = None  # None: unsigned


class Signatures:
    """A node's signing: its signer (the active keys, the RSA workers) and the writes
    of the signatures kept for retries, batched."""

    def __init__(self, signer: dkim.Signer, database: db.Database) -> None:
        self.signer = signer
        self._db = database
        self._kept: Batcher[tuple[uuid.UUID, bytes, tuple[int, ...], bytes], None] = Batcher(self._keep_batch)

    async def sign(self, message: Message, body: bytes, domain: str | None, c: str, *, whole: bool = False) -> Signed:
        """`body` with the signatures of the keys active now for `domain` (None: the
        From field's), canonicalised as `c`. `whole`: the message's body differs by
        transaction (tracking), so the cache is keyed by all of it, not its header."""
        if not self.signer.keys:
            return Signed(body, "unsigned: no active DKIM key")
        domain = domain or dkim.from_domain(body)
        keys = self.signer.for_domain(domain) if domain else []
        if not keys:
            return Signed(body, f"unsigned: no active key for {domain}" if domain else "unsigned: no From domain")
        signed_over = body if whole else body[: body.find(b"\r\n\r\n")]
        made = (hashlib.blake2b(signed_over, digest_size=16).digest(), tuple(k.id for k in keys))
        known = message.signatures.get(made)
        if isinstance(known, asyncio.Future):  # another transaction of the message is signing it
            fields = await asyncio.shield(known)
        elif known is not None:
            fields = known
        else:
            making = message.signatures[made] = asyncio.get_running_loop().create_future()
            try:
                signed = await self.signer.sign(body, keys, c=c)
            except BaseException as exc:
                del message.signatures[made]
                if isinstance(exc, Exception):
                    making.set_exception(exc)
                    making.exception()  # those waiting get it; nobody need be
                else:
                    making.cancel()
                raise
            fields = message.signatures[made] = signed[: len(signed) - len(body)]
            making.set_result(fields)
        return Signed(fields + body, " ".join(f"d={k.domain} s={k.selector}" for k in keys), made)

    async def keep(self, message: Message, made: Made) -> None:
        """Store the signature fields `made` on the message, for its retry (a lost
        one only means signing again)."""
        fields = message.signatures.get(made)
        if message.kept == made or not isinstance(fields, bytes):
            return
        message.kept = made
        try:
            await self._kept.submit((message.id, fields, made[1], made[0]))
        except errors.SpoolError as exc:
            message.kept = None
            log.info("dkim_signature_not_kept", queue_id=str(message.id), error=str(exc))

    async def _keep_batch(self, signed: list[tuple[uuid.UUID, bytes, tuple[int, ...], bytes]]) -> list[None]:
        await dkim.remember(self._db, signed)
        return [None] * len(signed)
