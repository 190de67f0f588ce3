"""The submission port: aiosmtpd on the daemon's own event loop.

policy    Settings, the handler hooks (who may send, AUTH, the durable accept),
          which EHLO names pass
assembly  how an accepted message is stored (Received, Message-ID, Date, key,
          priority and pool from the X-Mtad-* instructions, which it removes)
protocol  aiosmtpd's SMTP protocol adapted at the edge
server    the listening sockets and sessions, capped per client address and in
          all, drained at shutdown
"""

from mtad.base.smtp_data import MAX_LINE, has_long_line
from mtad.submission.assembly import MAX_PRIORITY, MIN_PRIORITY, Origin, TenantDefaults
from mtad.submission.policy import Acceptor, AuthThrottle, Handler, Settings, tls_context
from mtad.submission.server import Server, bind

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
