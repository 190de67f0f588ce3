"""The submission port: aiosmtpd on the daemon's own event loop.

policy    the handler hooks (who may send, AUTH, the durable accept),
          which EHLO names pass
assembly  how an accepted message is stored (Received, Message-ID, Date, key,
          priority and pool from the X-Mtad-* instructions, which it removes)
protocol  aiosmtpd's SMTP protocol adapted at the edge
server    the listening sockets and sessions, capped per client address and in
          all, drained at shutdown
settings  [submission] declared, and Settings: what the port takes (read without the
          rest: the package's names are imported when first used)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mtad.base.smtp_data import MAX_LINE, has_long_line
    from mtad.submission.assembly import MAX_PRIORITY, MIN_PRIORITY, Origin, TenantDefaults
    from mtad.submission.policy import Acceptor, AuthThrottle, Handler, tls_context
    from mtad.submission.server import Server, bind
    from mtad.submission.settings import Settings

_FROM = {
    "mtad.base.smtp_data": ("MAX_LINE", "has_long_line"),
    "mtad.submission.assembly": ("MAX_PRIORITY", "MIN_PRIORITY", "Origin", "TenantDefaults"),
    "mtad.submission.policy": ("Acceptor", "AuthThrottle", "Handler", "tls_context"),
    "mtad.submission.settings": ("Settings",),
    "mtad.submission.server": ("Server", "bind"),
}
_MODULE = {name: module for module, names in _FROM.items() for name in names}


def __getattr__(name: str) -> Any:
    if name not in _MODULE:
        raise AttributeError(f"module 'mtad.submission' has no attribute {name!r}")
    return getattr(importlib.import_module(_MODULE[name]), name)


__all__ = [
    "MAX_LINE",
    "MAX_PRIORITY",
    "MIN_PRIORITY",
    "Acceptor",
    "AuthThrottle",
    "Handler",
    "Origin",
    "Server",
    "Settings",
    "TenantDefaults",
    "bind",
    "has_long_line",
    "tls_context",
]
