"""DKIM: keys per signing domain, and the signature a message gets at transmission.

A key is an RSA-2048 (rsa-sha256, RFC 6376) or Ed25519 (ed25519-sha256, RFC 8463)
private key under a (domain, selector), stored in PostgreSQL sealed by mtad.base.vault
(migration 0008), in one of the states pending (generated, waiting for its DNS
record), active (signs), retiring (no longer signs; its record must stay published
for a while) and revoked. `generate` makes one and `record` gives the DNS TXT
record to publish for it.

`sign(message, keys)` returns the message with a DKIM-Signature field on top per
key (a Signer holds the active keys by domain: RSA and Ed25519 side by side when
both are active), relaxed/relaxed (or as [dkim] canonicalization says), over the
header fields RFC 6376 section 5.4 recommends that are present, with From listed
once more than it occurs so that none can be added later. The relaxed forms of
the fields and the body, and the selection of the fields, are mtad's own (a few
operations in C on whole byte strings: several times faster than dkimpy's, whose
output they equal, as the tests check); dkimpy gives the simple forms and the
folding of the field. The private-key operation is `cryptography`'s, on keys
parsed once when loaded (dkimpy's own RSA is pure Python: 20x slower); a Signer
runs the RSA operations in worker processes, off the event loop. No I/O but the
storage functions, which talk to PostgreSQL.
"""

from __future__ import annotations

import asyncio
import base64
import enum
import hashlib
import re
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import dkim as dkimpy
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, padding, rsa, utils
from dkim.canonicalization import CanonicalizationPolicy

from mtad import db
from mtad.base import errors, vault
from mtad.outbound import routing
from mtad.signing import settings, workers

DOMAIN = re.compile(r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$")
SELECTOR = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
SIMPLE = CanonicalizationPolicy.from_c_value(b"simple/simple")  # the relaxed forms are mtad's own (below)
# RFC 6376 section 5.4.1: the fields a signature should cover, when present (lower case).
SIGNED = (
    b"from", b"reply-to", b"subject", b"date", b"to", b"cc", b"message-id", b"in-reply-to", b"references",
    b"mime-version", b"content-type", b"content-transfer-encoding", b"content-disposition", b"content-id",
    b"resent-date", b"resent-from", b"resent-to", b"resent-cc", b"list-id", b"list-help", b"list-unsubscribe",
    b"list-unsubscribe-post", b"list-subscribe", b"list-post", b"list-owner", b"list-archive", b"feedback-id",
)  # fmt: skip
_SIGNED = frozenset(SIGNED)


class Algorithm(enum.StrEnum):
    RSA2048 = "rsa2048"  # a= rsa-sha256, k=rsa
    ED25519 = "ed25519"  # a= ed25519-sha256, k=ed25519 (RFC 8463)


class KeyState(enum.StrEnum):
    """Mirrors the Postgres enum dkim_key_state."""

    PENDING = "pending"  # generated; its record is not (known to be) published yet
    ACTIVE = "active"  # signs
    RETIRING = "retiring"  # replaced; its record stays published for the overlap
    REVOKED = "revoked"  # its record may be emptied (p=)


_TAGS = {Algorithm.RSA2048: (b"rsa-sha256", "rsa"), Algorithm.ED25519: (b"ed25519-sha256", "ed25519")}


@dataclass(frozen=True, slots=True)
class Key:
    """A signing key: its private half parsed, ready to sign."""

    domain: str
    selector: str
    algorithm: Algorithm
    private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey = field(repr=False)
    id: int = 0
    state: KeyState = KeyState.PENDING
    created_at: datetime | None = None
    der: bytes = field(default=b"", repr=False, compare=False)  # an RSA key's, as a signing process gets it (PKCS#8)

    def __post_init__(self) -> None:
        if not self.der and isinstance(self.private, rsa.RSAPrivateKey):
            der = self.private.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption())  # fmt: skip
            object.__setattr__(self, "der", der)

    def record(self) -> str:
        """The TXT record to publish at SELECTOR._domainkey.DOMAIN."""
        return record(self.algorithm, self.private)

    @property
    def name(self) -> str:
        """Where the record goes."""
        return f"{self.selector}._domainkey.{self.domain}"


def record(algorithm: Algorithm, private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey) -> str:
    """The DNS TXT record of a key: v=DKIM1; k=...; p=<public key, base64>."""
    public = private.public_key()
    if isinstance(public, ed25519.Ed25519PublicKey):  # RFC 8463: the raw 32 octets
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    else:  # RFC 6376: SubjectPublicKeyInfo, DER
        raw = public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return f"v=DKIM1; k={_TAGS[algorithm][1]}; p={base64.b64encode(raw).decode()}"


def generate(domain: str, selector: str, algorithm: Algorithm) -> Key:
    """A new pending key (RSA-2048 or Ed25519); ConfigError for a bad domain or selector."""
    domain, selector = domain.lower().rstrip("."), selector.lower()
    found = []
    if not DOMAIN.match(domain):
        found.append(f"DKIM domain {domain!r} is not a domain name")
    if not SELECTOR.match(selector):
        found.append(f"DKIM selector {selector!r}: letters, digits and '-', 1-63 of them")
    if found:
        raise errors.ConfigError(found)
    private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
    if algorithm is Algorithm.RSA2048:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    else:
        private = ed25519.Ed25519PrivateKey.generate()
    return Key(domain, selector, algorithm, private)


def default_selector(algorithm: Algorithm, now: datetime) -> str:
    """mtad-YYYYMM, with -ed for Ed25519 (so both kinds can be live in one month)."""
    return f"mtad-{now:%Y%m}" + ("-ed" if algorithm is Algorithm.ED25519 else "")


def free_selector(algorithm: Algorithm, now: datetime, taken: set[str]) -> str:
    """default_selector, or with -2, -3... when that one is taken (a second key in a month)."""
    selector, suffix = default_selector(algorithm, now), 2
    while selector in taken:
        selector, suffix = f"{default_selector(algorithm, now)}-{suffix}", suffix + 1
    return selector


def _pem(private: rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey) -> str:
    return private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _private(pem: str) -> rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey):
        raise errors.ConfigError([f"a stored DKIM key is neither RSA nor Ed25519 ({type(key).__name__})"])
    return key


# --- signing ---------------------------------------------------------------------------


CANONICALIZATIONS = settings.CANONICALIZATIONS


def sign(message: bytes, keys: Sequence[Key], now: float | None = None, c: str = "relaxed/relaxed") -> bytes:
    """The message with one DKIM-Signature field per key on top (the first key's
    signature first), canonicalised as `c` (header/body, one of CANONICALIZATIONS).
    The header block must end with CRLF CRLF (as mtad stores it)."""
    draft = Draft.of(message, keys, now, c)
    return draft.finish(private_operations(keys, draft.digests))


def private_operations(keys: Sequence[Key], digests: Sequence[bytes]) -> list[bytes]:
    """The signatures proper: each key's private operation over the SHA-256 digest
    of its signed data. cryptography runs them with the GIL released."""
    signatures = []
    for key, digest in zip(keys, digests, strict=True):
        if isinstance(key.private, rsa.RSAPrivateKey):
            signatures.append(key.private.sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())))
        else:  # RFC 8463 section 3: Ed25519 over the SHA-256 hash of the signed data
            signatures.append(key.private.sign(digest))
    return signatures


@dataclass(frozen=True, slots=True)
class Draft:
    """A message's DKIM-Signature fields up to b=, with the digest each key signs:
    everything but the private operations, which `finish` takes in key order."""

    message: bytes
    unsigned: list[bytes]  # per key, the field without its b= value
    digests: list[bytes]  # per key, SHA-256 of the signed header data

    @classmethod
    def of(cls, message: bytes, keys: Sequence[Key], now: float | None, c: str) -> Draft:
        split = message.find(b"\r\n\r\n")
        head, body = (message, b"") if split < 0 else (message[: split + 2], message[split + 4 :])
        fields = _fields(head)
        names = [name.lower() for name, _ in fields if name.lower() in _SIGNED]
        names.append(b"from")  # over-signed: a From added later breaks the signature
        selected = _select(fields, names)
        if c.startswith("relaxed/"):
            header_data = b"".join(_relaxed_field(name, value) for name, value in selected)
        else:
            header_data = b"".join(name + b":" + value for name, value in selected)  # simple: as they are
        canonical_body = relaxed_body(body) if c.endswith("/relaxed") else SIMPLE.canonicalize_body(body)
        body_hash = base64.b64encode(hashlib.sha256(canonical_body).digest())
        stamp = str(int(time.time() if now is None else now)).encode()
        unsigned = [_unsigned(key, c, names, body_hash, stamp) for key in keys]
        # The signature field itself is hashed last, with b= empty and no final CRLF.
        if c.startswith("relaxed/"):
            own = [_relaxed_field(b"DKIM-Signature", b" " + field + b"\r\n")[:-2] for field in unsigned]
        else:
            own = [b"DKIM-Signature: " + field for field in unsigned]
        return cls(message, unsigned, [hashlib.sha256(header_data + field).digest() for field in own])

    def finish(self, signatures: Sequence[bytes]) -> bytes:
        fields = []
        for unsigned, signature in zip(self.unsigned, signatures, strict=True):
            b = base64.b64encode(signature)
            folded = b"\r\n ".join(b[i : i + 72] for i in range(0, len(b), 72))
            fields.append(b"DKIM-Signature: " + unsigned + b"\r\n " + folded + b"\r\n")
        return b"".join((*fields, self.message))  # the message copied once


def _fields(head: bytes) -> list[tuple[bytes, bytes]]:
    """The header fields of a CRLF header block: (name, value with its folding and
    final CRLF), in order (as dkimpy.rfc822_parse gives them, in a third of the time)."""
    found: list[tuple[bytes, bytes]] = []
    for line in head.split(b"\r\n")[:-1]:
        if line[:1] in (b" ", b"\t") and found:
            name, value = found[-1]
            found[-1] = (name, value + line + b"\r\n")
        elif b":" in line:
            name, _, value = line.partition(b":")
            found.append((name, value + b"\r\n"))
    return found


def _select(fields: list[tuple[bytes, bytes]], names: list[bytes]) -> list[tuple[bytes, bytes]]:
    """The fields h= names, in its order: for each name, the last occurrence not yet
    taken, bottom up (RFC 6376 section 5.4.2); a name with none left selects nothing
    (the over-signing of From). As dkimpy.select_headers, in linear time."""
    by_name: dict[bytes, list[int]] = {}
    for index, (name, _) in enumerate(fields):
        by_name.setdefault(name.lower(), []).append(index)
    selected = []
    for name in names:
        left = by_name.get(name)
        if left:
            selected.append(fields[left.pop()])
    return selected


def _relaxed_field(name: bytes, value: bytes) -> bytes:
    """A field in the relaxed form (RFC 6376 section 3.4.2): the name in lower case,
    the value unfolded, runs of white space made one space, none around the colon
    or at the end."""
    value = value.replace(b"\r\n", b"")
    if b"\t" in value:
        value = value.replace(b"\t", b" ")
    if b"  " in value:
        value = _SPACE_RUNS.sub(b" ", value)
    return name.lower().rstrip(b" \t") + b":" + value.strip(b" ") + b"\r\n"


def _unsigned(key: Key, c: str, names: list[bytes], body_hash: bytes, stamp: bytes) -> bytes:
    tags = [
        (b"v", b"1"), (b"a", _TAGS[key.algorithm][0]), (b"c", c.encode()), (b"d", key.domain.encode()),
        (b"s", key.selector.encode()), (b"t", stamp), (b"h", b" : ".join(names)), (b"bh", body_hash),
    ]  # fmt: skip
    # Folded at spaces only (between tags, and around the colons of h=, where white
    # space is allowed), never inside a value.
    return bytes(dkimpy.fold(b"; ".join(b"=".join(tag) for tag in tags) + b"; b=", namelen=len(b"DKIM-Signature")))


@dataclass(slots=True)
class Signer:
    """The active keys by domain, loaded once (parsing a PEM key costs milliseconds),
    and the processes their RSA operations run in. An RSA-2048 signature costs about
    1 ms of CPU: on the event loop, or on a thread that takes the loop's GIL back and
    forth, that is about as much as the rest of a message's delivery. In `processes`
    worker processes (mtad.signing.rsa_worker, given requests in turn) it costs the
    loop a write and a read of a pipe and runs on another core. Ed25519 (about
    0.05 ms) is signed on the loop, where it costs less than the hand-over.
    processes = 0: all on the loop. A worker that ended (killed) is dropped, the
    signatures it owed are made on the loop, and the next message starts another."""

    keys: dict[str, list[Key]] = field(default_factory=dict)
    processes: int = 0
    made: int = 0  # messages signed
    _workers: list[workers.Worker] = field(default_factory=list)
    _turn: int = 0
    _starting: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def sign(self, message: bytes, keys: Sequence[Key], c: str = "relaxed/relaxed") -> bytes:
        """dkim.sign, with the RSA operations in the signer's processes."""
        draft = Draft.of(message, keys, None, c)
        self.made += 1
        far = [n for n, key in enumerate(keys) if key.algorithm is Algorithm.RSA2048] if self.processes else []
        if not far:
            return draft.finish(private_operations(keys, draft.digests))
        worker = await self._worker()
        try:
            if len(far) == 1:  # the usual case: no task for it
                made = [await worker.sign(keys[far[0]].der, draft.digests[far[0]])]
            else:
                made = await asyncio.gather(*(worker.sign(keys[n].der, draft.digests[n]) for n in far))
        except workers.WorkerGone:  # the process ended, or could not sign: on the loop this once
            if not worker.alive and worker in self._workers:
                self._workers.remove(worker)
                await worker.stop()
            return draft.finish(private_operations(keys, draft.digests))
        signatures = dict(zip(far, made, strict=True))
        near = [n for n in range(len(keys)) if n not in signatures]
        signatures.update(zip(near, private_operations([keys[n] for n in near], [draft.digests[n] for n in near]),
                              strict=True))  # fmt: skip
        return draft.finish([signatures[n] for n in range(len(keys))])

    async def _worker(self) -> workers.Worker:
        """The next worker in turn, after starting those missing."""
        await self._fill()
        self._turn = (self._turn + 1) % len(self._workers)
        return self._workers[self._turn]

    async def _fill(self) -> None:
        if len(self._workers) < self.processes:
            async with self._starting:  # one start at a time, however many messages wait for it
                while len(self._workers) < self.processes:
                    self._workers.append(await workers.Worker.start())

    async def start(self) -> None:
        """Start the workers now, when an RSA key is active, rather than at its first
        signature (a worker takes about 0.1 s to start)."""
        if any(k.algorithm is Algorithm.RSA2048 for found in self.keys.values() for k in found):
            await self._fill()

    def pids(self) -> list[int]:
        """The worker processes running."""
        return [worker.pid for worker in self._workers]

    async def close(self) -> None:
        """Stop the processes (after the last send)."""
        workers, self._workers = self._workers, []
        for worker in workers:
            await worker.stop()

    def for_domain(self, domain: str) -> list[Key]:
        return self.keys.get(domain.lower().rstrip("."), [])

    def replace(self, keys: Iterable[Key]) -> None:
        by_domain: dict[str, list[Key]] = {}
        for key in keys:
            if key.state is KeyState.ACTIVE:
                by_domain.setdefault(key.domain, []).append(key)
        for found in by_domain.values():
            found.sort(key=lambda k: (k.algorithm is not Algorithm.RSA2048, k.id))  # RSA first: the widest support
        self.keys = by_domain


_SPACE_RUNS = re.compile(rb"  +")
_FROM_DOMAIN = re.compile(rb"@([A-Za-z0-9.-]+)\s*>?\s*$")


def relaxed_body(body: bytes) -> bytes:
    """The relaxed canonical form of a CRLF body (RFC 6376 section 3.4.4): runs of
    white space made one space, white space at the end of each line removed, empty
    lines at the end removed, one CRLF at the end of a body that is not empty. A few
    whole-body operations in C, touching only runs of two or more (single spaces
    between words are most of a text): 5-10x faster on 50 KB than dkimpy's line by
    line, whose output it equals (a test checks)."""
    if b"\t" in body:
        body = body.replace(b"\t", b" ")
    if b" " in body:  # a memchr; none in base64 (most of a large message), so no search for pairs
        if b"  " in body:
            body = _SPACE_RUNS.sub(b" ", body)
        body = body.replace(b" \r\n", b"\r\n")
    body = body.rstrip(b"\r\n")
    return body + b"\r\n" if body else b""


def from_domain(message: bytes) -> str | None:
    """The domain of the From field's address (None: none found)."""
    split = message.find(b"\r\n\r\n")
    head = message if split < 0 else message[: split + 2]
    value = next((v for n, v in _fields(head) if n.lower() == b"from"), None)
    if value is None:
        return None
    match = _FROM_DOMAIN.search(value.replace(b"\r\n", b"").strip())
    return match.group(1).decode().lower() if match else None


# --- storage ------------------------------------------------------------------------------


async def add(database: db.Database, key: Key, sealer: vault.Vault) -> Key:
    """Store a new pending key (its private half sealed); Conflict if the selector is taken."""
    try:
        row = await database.fetchrow(
            "dkim/insert", key.domain, key.selector, key.algorithm.value, sealer.seal(vault.Secret(_pem(key.private))),
            key.record(),
        )  # fmt: skip
    except errors.Conflict:
        raise errors.Conflict(f"DKIM selector {key.selector!r} of {key.domain} already exists") from None
    assert row is not None
    return Key(key.domain, key.selector, key.algorithm, key.private, row["id"], KeyState(row["state"]),
               row["created_at"])  # fmt: skip


@dataclass(frozen=True, slots=True)
class Stored:
    """A key as listed (never its private half)."""

    id: int
    domain: str
    selector: str
    algorithm: Algorithm
    state: KeyState
    record: str
    created_at: datetime
    changed_at: datetime
    published_at: datetime | None = None  # pending: first seen published in DNS
    published_ttl: float | None = None  # pending: the TTL of that answer


async def list_all(database: db.Database) -> list[Stored]:
    return [_stored(r) for r in await database.fetch("dkim/list")]


def _stored(r: db.Row) -> Stored:
    return Stored(r["id"], r["domain"], r["selector"], Algorithm(r["algorithm"]), KeyState(r["state"]), r["record"],
                  r["created_at"], r["changed_at"], r["published_at"], r["published_ttl"])  # fmt: skip


async def set_state(database: db.Database, domain: str, selector: str, state: KeyState, now: datetime) -> Stored:
    """Move a key to `state`; NotFound when there is no such key."""
    row = await database.fetchrow("dkim/set_state", domain.lower(), selector.lower(), state.value, now)
    if row is None:
        raise errors.NotFound(f"no DKIM key {selector!r} for {domain!r}")
    return _stored(row)


async def published(database: db.Database, key_id: int, at: datetime | None, ttl: float | None) -> None:
    """A pending key was seen published at `at` with TTL `ttl` (the first sighting is
    kept); at None: it is not published (any sighting is forgotten)."""
    await database.execute("dkim/published", key_id, at, ttl)


async def activate(database: db.Database, key_id: int, now: datetime) -> list[tuple[str, str, str, str]]:
    """A pending key becomes active; the domain's active key of the same algorithm
    retires (events written). Returns (domain, selector, from, to) of each change."""
    return [
        (r["domain"], r["selector"], r["was"], r["state"]) for r in await database.fetch("dkim/activate", key_id, now)
    ]


async def revoke(database: db.Database, key_id: int, now: datetime) -> bool:
    """A retiring key is revoked (its record may be emptied); False if it was not retiring."""
    return await database.fetchrow("dkim/revoke", key_id, now) is not None


async def generated(database: db.Database, key: Key, now: datetime) -> None:
    """The event of a key the rotation generated, with the record to publish."""
    await database.execute("dkim/generated", now, key.domain, key.selector, key.algorithm.value, key.record())


def matches(published: Sequence[str], expected: str) -> bool:
    """Whether a TXT answer (dnspython's text of each record: quoted strings) holds
    the expected record: the same key type and public key (tags compared, not text)."""
    want = _tags(expected)
    for value in published:
        got = _tags(routing.txt_text(value))
        if got.get("p") == want.get("p") and got.get("k", "rsa") == want.get("k", "rsa") and got.get("p"):
            return True
    return False


def _tags(record: str) -> dict[str, str]:
    tags = {}
    for part in record.split(";"):
        name, _, value = part.partition("=")
        if name.strip():
            tags[name.strip().lower()] = "".join(value.split())
    return tags


async def remember(database: db.Database, signed: Sequence[tuple[uuid.UUID, bytes, tuple[int, ...], bytes]]) -> None:
    """Store the signature fields messages were sent with: (message, fields, key ids,
    header digest) each, in one statement, for their retries to reuse."""
    await database.execute(
        "dkim/remember", [m for m, _, _, _ in signed], [f for _, f, _, _ in signed],
        ["{" + ",".join(map(str, k)) + "}" for _, _, k, _ in signed], [h for _, _, _, h in signed],
    )  # fmt: skip


async def load(database: db.Database, sealer: vault.Vault) -> list[Key]:
    """Every active key, opened and parsed (for a Signer)."""
    keys = []
    for r in await database.fetch("dkim/active"):
        private = _private(sealer.open(bytes(r["private_key"])).reveal())
        keys.append(Key(r["domain"], r["selector"], Algorithm(r["algorithm"]), private, r["id"],
                        KeyState(r["state"]), r["created_at"]))  # fmt: skip
    return keys
