"""Secrets at rest: the passwords and refresh tokens of sending accounts, sealed.

A secret is stored in PostgreSQL only sealed (Fernet: AES-128-CBC and an
HMAC-SHA256 over it, with a timestamp), with a key that never is in the
database: it is read from a file (`[accounts] key_file`) or an environment
variable (`[accounts] key_env`). Without the key a stored secret is useless;
with a different key it does not open, and says so instead of sending garbage
to a smarthost.

`Secret` holds an opened secret in memory and never shows it: not in its repr,
not in str(), not in a log record or JSON; `reveal()` is the one way to it, for
the AUTH command. Sync, no I/O beyond reading the key once.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog
from cryptography.fernet import Fernet, InvalidToken

from mtad.base import errors

logger = structlog.get_logger("mtad.vault")

NO_KEY = (
    "[accounts] key_file or key_env: account secrets, DKIM keys and webhook secrets are sealed with a key mtad "
    "keeps outside the database; make one with `mtad accounts key > /etc/mtad/accounts.key` (mode 0600, "
    "readable by mtad alone), then set [accounts] key_file to that file"
)


def make_key(path: Path) -> bool:
    """Write a new key to `path` (mode 0600) unless a key is there already; True when
    this call wrote it. Made whole in a temporary file and linked into place, so a
    reader never sees half a key and two makers keep one key."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{os.getpid()}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(Vault.new_key() + b"\n")
        os.link(draft, path)
    except FileExistsError:
        return False
    finally:
        draft.unlink(missing_ok=True)
    return True


class Secret:
    """A password or token in memory, shown as '***'."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class Vault:
    """Seals and opens secrets with one key."""

    def __init__(self, key: bytes) -> None:
        try:
            self._fernet = Fernet(key)
        except ValueError:
            raise errors.ConfigError(
                ["[accounts] key: expected 32 bytes in URL-safe base64 (make one with `mtad accounts key`)"]
            ) from None

    @staticmethod
    def new_key() -> bytes:
        return Fernet.generate_key()

    @classmethod
    def configured(cls, key_file: Path | None, key_env: str | None, make: bool) -> Vault | None:
        """[accounts]' key: the one configured, else on the embedded default mtad's own
        (made at the first start); with neither, None (relayed mail waits, and says why:
        config refuses [account_pools] without a key)."""
        if key_file is None and not key_env:
            return None
        if make and key_file is not None and make_key(key_file):
            logger.info("accounts_key_made", path=str(key_file), mode="0600")
        return cls.from_config(key_file, key_env)

    @classmethod
    def from_config(cls, key_file: Path | None, key_env: str | None) -> Vault:
        """The key from the file, else the environment variable; ConfigError naming the
        key when neither gives one."""
        if key_file is not None:
            try:
                return cls(key_file.read_bytes().strip())
            except OSError as exc:
                raise errors.ConfigError([f"[accounts] key_file: cannot read {key_file}: {exc.strerror}"]) from None
        if key_env:
            value = os.environ.get(key_env, "").strip()
            if not value:
                raise errors.ConfigError([f"[accounts] key_env: the environment variable {key_env} is not set"])
            return cls(value.encode())
        raise errors.ConfigError([NO_KEY])

    def seal(self, secret: Secret) -> bytes:
        return self._fernet.encrypt(secret.reveal().encode())

    def open(self, sealed: bytes) -> Secret:
        try:
            return Secret(self._fernet.decrypt(sealed).decode())
        except InvalidToken:
            raise errors.ConfigError(
                ["[accounts] key: a stored secret does not open with this key (was the key changed?)"]
            ) from None


def hmac_key(section: str, path: Path, make: bool) -> bytes:
    """An HMAC key from its file ([section] key_file); mtad's own is made first on the
    embedded default. ConfigError naming the key when it cannot be read."""
    if make and make_key(path):
        logger.info("key_made", key_file=str(path), section=section)
    try:
        return path.read_bytes().strip()
    except OSError as exc:
        raise errors.ConfigError([f"[{section}] key_file: cannot read {path}: {exc.strerror}"]) from None
