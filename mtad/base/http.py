"""HTTP serving on aiohttp: `Listener` runs an application on TCP addresses, and
`observability` is the application of GET /metrics (Prometheus text format) and
GET /healthz.

At scrape time the spool depth is read from PostgreSQL and the node's submission
processes are asked for their counts (`others`).
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable, Sequence

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from mtad.base import errors, metrics
from mtad.base.endpoints import HostPort

log = structlog.get_logger("mtad.http")

MAX_HEADER_BYTES = 16 * 1024


class Listener:
    """Serves an application (`app`) on TCP addresses, with TLS when given a context:
    `start`, then `stop` (requests in flight get `grace` seconds)."""

    def __init__(self, application: web.Application, *, ssl_context: ssl.SSLContext | None = None,
                 grace: float = 5.0) -> None:  # fmt: skip
        self._app = application
        self._ssl = ssl_context
        self._grace = grace
        self._runner: web.AppRunner | None = None

    @property
    def addresses(self) -> list[HostPort]:
        """Where it listens (a port 0 asked for is the port given)."""
        if self._runner is None:
            return []
        return [HostPort(name[0], name[1]) for name in self._runner.addresses]

    async def start(self, listen: Sequence[HostPort]) -> None:
        """Listens on every address, or on none: OSError when one cannot be bound."""
        runner = web.AppRunner(self._app, handle_signals=False, access_log=None, shutdown_timeout=self._grace,
                               max_field_size=MAX_HEADER_BYTES, max_line_size=MAX_HEADER_BYTES)  # fmt: skip
        await runner.setup()
        try:
            for where in listen:
                await web.TCPSite(runner, where.host, where.port, ssl_context=self._ssl).start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner

    async def stop(self) -> None:
        """Stops listening, lets requests in flight finish (up to `grace`), closes."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


def observability(
    *,
    depth: Callable[[], Awaitable[dict[str, int]]],
    healthy: Callable[[], Awaitable[bool]],
    others: Callable[[], Awaitable[Sequence[Sequence[metrics.Counted]]]] | None = None,
) -> web.Application:
    """GET /metrics and GET /healthz; `depth`, `healthy` and `others` are read per request."""

    async def scrape(request: web.Request) -> web.Response:
        try:
            metrics.set_spool_depth(await depth())
        except errors.SpoolError as exc:  # served all the same: the depth is stale
            log.warning("metrics_depth_unavailable", error=str(exc))
        counted = await others() if others is not None else ()
        response = web.Response(body=metrics.exposition(counted))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    async def health(request: web.Request) -> web.Response:
        if await healthy():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="spool database unavailable\n")

    application = web.Application()
    application.router.add_get("/metrics", scrape)
    application.router.add_get("/healthz", health)
    return application
