"""PostgreSQL: the only package that imports asyncpg.

access    the pool, a connection, named SQL (mtad/sql/NAME.sql), errors translated
          once into mtad's (DatabaseUnavailable, OutcomeUnknown, Conflict, SpoolError)
opening   the spool opened for the daemon or a tool; embedded, owner: the embedded
          server and the daemon that owns its data directory; migrate: the schema
settings  [database] declared

Its names (`db.Database`, `db.sql`, ...) are access's, imported when first used: a
configuration that only reads settings.py loads neither asyncpg nor structlog.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from mtad.db.settings import CONNECT_TIMEOUT

if TYPE_CHECKING:
    from mtad.db.access import (
        Connection,
        Database,
        Listener,
        Listening,
        Row,
        close,
        connect_once,
        ensure_database,
        retrying,
        sql,
        translate,
    )

__all__ = ["CONNECT_TIMEOUT", "Connection", "Database", "Listener", "Listening", "Row", "close", "connect_once",
           "ensure_database", "retrying", "sql", "translate"]  # fmt: skip
_ACCESS = frozenset(__all__) - {"CONNECT_TIMEOUT"}


def __getattr__(name: str) -> Any:
    if name not in _ACCESS:
        raise AttributeError(f"module 'mtad.db' has no attribute {name!r}")
    value = getattr(importlib.import_module("mtad.db.access"), name)
    globals()[name] = value  # looked up directly from now on
    return value
