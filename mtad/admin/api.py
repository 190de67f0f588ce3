"""The admin HTTP API (`[admin]`): the operations of the command line over HTTP,
JSON in and out, and HTTP injection of mail.

Every route under /v1 but the OpenAPI document wants `Authorization: Bearer
<token>` with the token of `[admin] token_file` (compared in constant time); a
GET takes the status page's login cookie too (mtad.admin.page, served at `/`).
Errors are JSON objects `{"error": ...}` with a 4xx or 5xx status: 400 for a body
that is not JSON, or a filter of the queue that is not one (with "field"), 401
without the token, 404 for what does not exist, 409 for a conflict, 422 for a
request that cannot be done as asked (with "field" naming the field of the body
or query at fault, when one is), 503 when PostgreSQL does not answer. A name that
names nothing (a tenant, pool, provider group, account, webhook endpoint, source
address: mtad.admin.names) is a 404 in the path and a 422 in the body or query,
with "did_you_mean" the closest known name (or null).
A message injected is answered 202 only after its COMMIT; a change of what may be
sent or submitted (pause, suspend, reroute, an account's state) only once every
live node holds it, its answer saying which did ("acknowledged").
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import structlog
from aiohttp import web

from mtad import db, submission
from mtad.admin import campaigns_api, control, filters, inject, names, openapi, page, queue_api, status, views
from mtad.base import errors, metrics, values, vault
from mtad.base.replies import Reply
from mtad.deliver import shaping
from mtad.feedback import reputation, suppression, webhook_outbox, webhooks
from mtad.mailboxes import accounts, inboxes
from mtad.spool import queue, quotas, suspensions, tenants

log = structlog.get_logger("mtad.admin")

MAX_BODY = 64 * 1024 * 1024  # octets of a request: above any message size mtad accepts, base64 included


@dataclass(frozen=True, slots=True)
class Services:
    """What the API acts through."""

    database: db.Database
    token: str
    acceptor: submission.Acceptor | None  # None: this node takes no mail over HTTP
    default_tenant: str
    limits: Callable[[str], tuple[quotas.Quota, reputation.Guard]]  # a tenant's quotas and reputation limits
    node_timeout: float  # seconds since its heartbeat that a node counts as live
    sealer: vault.Vault | None = None  # seals webhook secrets (None: no key, no webhook endpoint made here)
    configured: Callable[[], names.Configured] = names.Configured  # the names of the configuration as it is now


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, frozenset | set):
        return sorted(value)
    if isinstance(value, float) and math.isinf(value):
        return None
    return str(value)


# One encoder for every answer: json.dumps with options builds a new one per call.
_dumps = json.JSONEncoder(default=_plain, ensure_ascii=False).encode


def _json(value: Any, status: int = 200) -> web.Response:
    return web.json_response(value, status=status, dumps=_dumps)


def _error(status: int, why: str, **more: Any) -> web.Response:
    return _json({"error": why, **more}, status)


def application(services: Services) -> web.Application:
    """The /v1 routes, behind the bearer token."""

    @web.middleware
    async def guarded(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
        if request.path.startswith("/v1/") and request.path != "/v1/openapi.json" and not _allowed(request, services):
            refused = _error(401, "give the admin token: Authorization: Bearer <token of [admin] token_file>")
            refused.headers["WWW-Authenticate"] = "Bearer"
            return refused
        try:
            return await handler(request)
        except web.HTTPException as exc:  # aiohttp's own: 404 of an unknown route, 405
            if exc.status >= 400:
                return _error(exc.status, exc.reason)
            raise
        except _Bad as exc:
            return _error(exc.status, str(exc))
        except filters.BadParameter as exc:  # a query's or body's value that is not one
            return _error(400, str(exc), field=exc.field)
        except inject.Invalid as exc:
            return _error(422, str(exc), **({"field": exc.field} if exc.field is not None else {}))
        except names.Unknown as exc:  # named in the path: 404; in the body: 422 with the field
            more = {"field": exc.field} if exc.field is not None else {}
            return _error(404 if exc.field is None else 422, str(exc), did_you_mean=exc.suggestion, **more)
        except errors.NotFound as exc:
            return _error(404, str(exc))
        except errors.Conflict as exc:
            return _error(409, str(exc))
        except errors.DatabaseUnavailable as exc:
            return _error(503, f"the spool database does not answer: {exc}")
        except errors.SpoolError as exc:
            log.error("admin_failed", path=request.path, error=str(exc))
            return _error(500, "the spool failed; see the log")
        except errors.MtadError as exc:
            return _error(422, str(exc))
        except Exception:  # a bug: logged with its traceback, answered as JSON like every other error
            log.exception("admin_failed", path=request.path)
            return _error(500, "internal error; see the log")

    api = _Api(services)
    app = web.Application(middlewares=[guarded], client_max_size=MAX_BODY)
    app.router.add_get("/v1/openapi.json", api.openapi)
    for path, read in status.Status(services.database, services.node_timeout).routes().items():
        app.router.add_get(path, _answering(read))  # before /v1/queue/{id}
    app.router.add_post("/v1/messages", api.inject)
    app.router.add_get("/v1/queue", api.queue_list)
    app.router.add_get("/v1/queue/summary", api.queue_summary)
    app.router.add_get("/v1/queue/{id}", api.queue_show)
    app.router.add_post("/v1/queue/{action}", api.queue_act_all)
    app.router.add_post("/v1/queue/{id}/{action}", api.queue_act)
    app.router.add_get("/v1/tenants", api.tenants_list)
    app.router.add_post("/v1/tenants", api.tenant_add)
    app.router.add_get("/v1/tenants/{name}", api.tenant_show)
    app.router.add_post("/v1/tenants/{name}/pause", api.tenant_pause)
    app.router.add_post("/v1/tenants/{name}/resume", api.tenant_resume)
    app.router.add_get("/v1/campaigns", api.campaigns_list)
    app.router.add_post("/v1/campaigns", api.campaign_add)
    app.router.add_get("/v1/campaigns/{name}", api.campaign_show)
    app.router.add_post("/v1/campaigns/{name}/{action}", api.campaign_act)
    app.router.add_get("/v1/reputation", api.reputation)
    app.router.add_get("/v1/suppressions", api.suppressions_list)
    app.router.add_post("/v1/suppressions", api.suppression_add)
    app.router.add_delete("/v1/suppressions/{address}", api.suppression_remove)
    app.router.add_get("/v1/suspensions", api.suspensions_list)
    app.router.add_post("/v1/suspensions", api.suspend)
    app.router.add_delete("/v1/suspensions/{kind}/{key}", api.resume)
    app.router.add_post("/v1/reroutes", api.reroute)
    app.router.add_delete("/v1/reroutes/{provider}", api.unroute)
    app.router.add_get("/v1/webhooks", api.webhooks_list)
    app.router.add_post("/v1/webhooks", api.webhook_add)
    app.router.add_delete("/v1/webhooks/{id}", api.webhook_remove)
    app.router.add_post("/v1/webhooks/{id}/rotate-secret", api.webhook_rotate)
    app.router.add_post("/v1/webhooks/replay", api.webhooks_replay)
    app.router.add_get("/v1/accounts", api.accounts_list)
    app.router.add_post("/v1/accounts/{name}/{action}", api.account_state)
    app.router.add_get("/v1/buckets", api.buckets)
    page.add_routes(app, services.token)
    return app


def _allowed(request: web.Request, services: Services) -> bool:
    """The bearer token; or, for a GET, the status page's cookie (a change always
    wants the header, which another site's page cannot send: no CSRF)."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return hmac.compare_digest(token.strip().encode(), services.token.encode())
    return request.method in ("GET", "HEAD") and page.signed_in(request.cookies.get(page.COOKIE), services.token)


def _answering(read: Callable[[Mapping[str, str]], Awaitable[Any]]) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        return _json(await read(request.query))

    return handler


class _Bad(Exception):
    """A request mtad cannot take as it is: its status and why."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(why)
        self.status = status


async def _body(request: web.Request) -> Any:
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise _Bad(413, f"the body is larger than {MAX_BODY} octets") from None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Bad(400, f"the body is not JSON: {exc}") from None


def _reply_status(reply: Reply) -> int:
    """The HTTP status of what the accept refused with."""
    if reply.enhanced == "4.7.1":  # a tenant paused or over a rate quota
        return 429
    if reply.enhanced == "4.3.1":  # over the spool quota
        return 507
    if reply.is_transient:
        return 503
    if reply.code == 552:
        return 413
    return 422


class _Api:
    def __init__(self, services: Services) -> None:
        self._s = services
        self._db = services.database
        self._tenants: set[str] = set()  # tenants found to exist (none is ever removed)
        self._queue = queue_api.Queue(services.database, services.configured, services.default_tenant)

    async def _known_tenant(self, name: str, field: str | None = None) -> str:
        """`name`, a tenant's (names.tenant), looked up once."""
        if name not in self._tenants:
            self._tenants.add(await names.tenant(self._db, name, self._s.default_tenant, field=field))
        return name

    async def _tenant_given(self, request: web.Request) -> str | None:
        """The tenant of the query's "tenant" (None: none given; "": the global suppression list)."""
        name = request.query.get("tenant")
        return await self._known_tenant(name, "tenant") if name else name

    async def openapi(self, request: web.Request) -> web.Response:
        return _json(openapi.DOCUMENT)

    # --- injection ---------------------------------------------------------------------

    async def inject(self, request: web.Request) -> web.Response:
        acceptor = self._s.acceptor
        if acceptor is None:
            return _error(503, "this node takes no mail over HTTP")
        given = inject.parse(await _body(request), request.headers.get("Idempotency-Key"))
        tenant = await self._known_tenant(given.tenant, "tenant") if given.tenant else self._s.default_tenant
        sub = acceptor.settings
        if len(given.content) > sub.max_message_size:
            return _error(413, f"the message is larger than [submission] max_message_size ({sub.max_message_size})")
        if len(given.recipients) > sub.max_recipients:
            return _error(422, f"more than [submission] max_recipients ({sub.max_recipients}) recipients")
        why = acceptor.refusal(tenant)
        if why is not None:
            return _error(_reply_status(why), why.text, smtp=why.line())
        refused = []
        recipients = []
        for address in given.recipients:
            checked = await acceptor.recipient(tenant, address, given.smtputf8)
            if isinstance(checked, Reply):
                refused.append({"recipient": address, "smtp": checked.line()})
            else:
                recipients.append(checked)
        if not recipients:
            return _error(422, "no recipient can be sent to", refused=refused)
        origin = submission.Origin(tenant=tenant, client=request.remote or "", helo="http", tls=request.secure,
                                   authenticated=True)  # fmt: skip
        started = time.perf_counter()
        accepted = await acceptor.accept(given.content, sender=given.sender, recipients=recipients,
                                         smtputf8=given.smtputf8, origin=origin)  # fmt: skip
        if isinstance(accepted, Reply):
            return _error(_reply_status(accepted), accepted.text, smtp=accepted.line())
        metrics.ACCEPT_LATENCY.observe(time.perf_counter() - started)
        return _json({"queue_id": str(accepted.queue_id), "duplicate": accepted.duplicate,
                      "recipients": [str(r) for r in recipients], "refused": refused}, 202)  # fmt: skip

    # --- the queue -----------------------------------------------------------------------

    async def queue_list(self, request: web.Request) -> web.Response:
        return _json(await self._queue.listing(request.query))

    async def queue_summary(self, request: web.Request) -> web.Response:
        return _json(await self._queue.summary(request.query))

    async def queue_show(self, request: web.Request) -> web.Response:
        return _json(views.message(await queue.show(self._db, request.match_info["id"])))

    async def queue_act_all(self, request: web.Request) -> web.Response:
        return _json(await self._queue.act(request.match_info["action"], await _body(request)))

    async def queue_act(self, request: web.Request) -> web.Response:
        return _json(await self._queue.act_on(request.match_info["id"], request.match_info["action"]))

    # --- tenants -----------------------------------------------------------------------

    async def tenants_list(self, request: web.Request) -> web.Response:
        return _json({"tenants": [{k: v for k, v in t.items() if k != "password_hash"}
                                  for t in await tenants.list_all(self._db)]})  # fmt: skip

    async def tenant_add(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("name"), str) or not isinstance(
                body.get("password"), str):  # fmt: skip
            raise _Bad(422, 'give {"name": ..., "password": ...}')
        await tenants.add(self._db, body["name"], body["password"])
        return _json({"name": body["name"], "added": True}, 201)

    async def tenant_show(self, request: web.Request) -> web.Response:
        name = await self._known_tenant(_tenant(request))
        quota, guard = self._s.limits(name)
        return _json(await views.tenant(self._db, name, quota, guard, datetime.now(UTC)))

    async def tenant_pause(self, request: web.Request) -> web.Response:
        name = await self._known_tenant(_tenant(request))
        body = await _body(request) if request.can_read_body else {}
        reason = body.get("reason", "paused by an operator") if isinstance(body, dict) else None
        if not isinstance(reason, str) or not reason.strip():
            raise _Bad(422, 'reason: a string, e.g. {"reason": "complaints from a new list"}')
        held = await tenants.pause(self._db, name, reason, by="operator", now=datetime.now(UTC))
        if held is None:
            raise errors.Conflict(f"tenant {name} is paused already")
        return _json({"tenant": name, "paused": True, "held": held, "acknowledged": await self._held()})

    async def tenant_resume(self, request: web.Request) -> web.Response:
        name = await self._known_tenant(_tenant(request))
        released = await tenants.resume(self._db, name, by="operator", now=datetime.now(UTC))
        if released is None:
            raise errors.Conflict(f"tenant {name} is not paused")
        return _json({"tenant": name, "paused": False, "released": released, "acknowledged": await self._held()})

    # --- campaigns (of the tenant of ?tenant=, else the default one) ---------------------

    async def campaigns_list(self, request: web.Request) -> web.Response:
        return _json(await campaigns_api.listing(self._db, await self._tenant_given(request)))

    async def campaign_add(self, request: web.Request) -> web.Response:
        body = await _body(request)
        tenant = body.get("tenant") if isinstance(body, dict) else None
        tenant = await self._known_tenant(tenant, "tenant") if tenant else self._s.default_tenant
        return _json(await campaigns_api.add(self._db, tenant, body), 201)

    async def campaign_show(self, request: web.Request) -> web.Response:
        tenant = await self._tenant_given(request) or self._s.default_tenant
        return _json(await campaigns_api.show(self._db, tenant, request.match_info["name"]))

    async def campaign_act(self, request: web.Request) -> web.Response:
        tenant = await self._tenant_given(request) or self._s.default_tenant
        body = await _body(request) if request.can_read_body else {}
        done = await campaigns_api.act(self._db, tenant, request.match_info["name"], request.match_info["action"],
                                       body)  # fmt: skip
        return _json({**done, "acknowledged": await self._held()})

    async def reputation(self, request: web.Request) -> web.Response:
        scope = request.query.get("scope")
        if scope is not None and scope not in reputation.SCOPES:
            raise _Bad(422, f"scope: one of {', '.join(reputation.SCOPES)}")
        return _json({"windows": await reputation.windows(self._db, scope, tenant=await self._tenant_given(request))})

    # --- suppression ---------------------------------------------------------------------

    async def suppressions_list(self, request: web.Request) -> web.Response:
        reason = _reason(request.query.get("reason"))
        found = await suppression.entries(self._db, await self._tenant_given(request), reason)
        return _json({"suppressions": [_entry(e) for e in found]})

    async def suppression_add(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("address"), str):
            raise _Bad(422, 'give {"address": ..., "tenant": ... (absent: every tenant), "reason": ..., "note": ...}')
        tenant = body.get("tenant", suppression.GLOBAL)
        if isinstance(tenant, str) and tenant:
            await self._known_tenant(tenant, "tenant")
        reason = _reason(body.get("reason", "manual")) or suppression.Reason.MANUAL
        entry = await suppression.add(self._db, body["address"], reason, datetime.now(UTC), tenant=tenant,
                                      detail=body.get("note"))  # fmt: skip
        if entry is None:
            return _json({"address": suppression.check_address(body["address"]), "tenant": tenant, "added": False})
        return _json({**_entry(entry), "added": True}, 201)

    async def suppression_remove(self, request: web.Request) -> web.Response:
        tenant = await self._tenant_given(request) or suppression.GLOBAL
        if not await suppression.remove(self._db, request.match_info["address"], tenant):
            raise errors.NotFound(f"{request.match_info['address']} is not on that list")
        return _json({"address": request.match_info["address"], "tenant": tenant, "removed": True})

    # --- suspensions and reroutes ----------------------------------------------------------

    async def _held(self) -> dict[str, Any]:
        """Once an operator's change is committed: until every live node has applied it
        (a few seconds at most); the acknowledgements, as the answer says them."""
        acks = await control.held(self._db, self._s.node_timeout)
        if acks.late:
            log.warning("controls_late", version=acks.version, nodes=[late.node for late in acks.late])
        return acks.as_dict()

    async def suspensions_list(self, request: web.Request) -> web.Response:
        suspended, rerouted = await suspensions.listing(self._db, datetime.now(UTC))
        return _json({"suspensions": [dataclasses.asdict(x) for x in suspended],
                      "reroutes": [dataclasses.asdict(x) for x in rerouted],
                      "paused_tenants": await tenants.paused(self._db)})  # fmt: skip

    async def suspend(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("kind"), str) or not isinstance(body.get("key"), str):
            raise _Bad(422, f'give {{"kind": one of {", ".join(suspensions.KINDS)}, "key": ..., "reason": ..., '
                            '"for": "2h" (absent: until resumed)}')  # fmt: skip
        await names.suspendable(self._db, body["kind"], body["key"], self._s.configured, self._s.default_tenant,
                                field="key")  # fmt: skip
        now = datetime.now(UTC)
        reason = _reason_text(body, "suspended by an operator")
        done = await control.suspend(self._db, body["kind"], body["key"], reason, _until(body, now), now)
        return _json({**dataclasses.asdict(done), "acknowledged": await self._held()}, 201)

    async def resume(self, request: web.Request) -> web.Response:
        kind, key = request.match_info["kind"], request.match_info["key"]
        await names.suspended(self._db, kind, key, datetime.now(UTC))
        released = await control.resume(self._db, kind, key, datetime.now(UTC))
        if released is None:
            raise errors.NotFound(f"{kind} {key} is not suspended")
        return _json({"kind": kind, "key": key, "released": released, "acknowledged": await self._held()})

    async def reroute(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("provider"), str) or not isinstance(
                body.get("pool"), str):  # fmt: skip
            raise _Bad(422, 'give {"provider": GROUP, "pool": POOL, "reason": ..., "for": "2h"}')
        configured = self._s.configured()
        await names.group(self._db, body["provider"], configured, field="provider")
        names.pool(body["pool"], configured, field="pool")
        now = datetime.now(UTC)
        reason = _reason_text(body, "rerouted by an operator")
        done = await suspensions.reroute(self._db, body["provider"], body["pool"], reason, _until(body, now), now)
        return _json({**dataclasses.asdict(done), "acknowledged": await self._held()}, 201)

    async def unroute(self, request: web.Request) -> web.Response:
        await names.rerouted(self._db, request.match_info["provider"], datetime.now(UTC))
        ended = await suspensions.unroute(self._db, request.match_info["provider"])
        if ended is None:
            raise errors.NotFound(f"provider group {request.match_info['provider']} is not rerouted")
        return _json({"provider": ended.provider, "rerouted": False, "acknowledged": await self._held()})

    # --- webhooks, accounts, buckets: read only --------------------------------------

    async def webhooks_list(self, request: web.Request) -> web.Response:
        found = await webhooks.listing(self._db, await self._tenant_given(request))
        return _json({"endpoints": [{"id": e.id, "tenant": e.tenant, "url": e.url, "events": e.events,
                                     "batch": e.batch, "previous_until": e.previous_until,
                                     "created_at": e.created_at, "pending": e.pending, "delivered": e.delivered,
                                     "dead": e.dead} for e in found]})  # fmt: skip

    async def webhook_add(self, request: web.Request) -> web.Response:
        """A tenant's endpoint; its secret is in this answer and never again."""
        sealer = self._sealer()
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("tenant"), str) or not isinstance(
                body.get("url"), str):  # fmt: skip
            raise _Bad(422, 'give {"tenant": ..., "url": ..., "events": [kinds] (absent: all), "batch": 1}')
        await self._known_tenant(body["tenant"], "tenant")
        kinds = body.get("events")
        batch = body.get("batch", 1)
        if kinds is not None and (not isinstance(kinds, list) or not all(isinstance(k, str) for k in kinds)):
            raise _Bad(422, "events: a list of event kinds")
        if not isinstance(batch, int) or isinstance(batch, bool):
            raise _Bad(422, "batch: a whole number")
        try:
            endpoint, secret = await webhooks.add(self._db, sealer, body["tenant"], body["url"], kinds, batch)
        except ValueError as exc:
            raise _Bad(422, str(exc)) from None
        return _json({"id": endpoint.id, "tenant": endpoint.tenant, "url": endpoint.url, "events": endpoint.events,
                      "batch": endpoint.batch, "secret": secret}, 201)  # fmt: skip

    async def webhook_remove(self, request: web.Request) -> web.Response:
        endpoint = await names.webhook(self._db, _int_path(request, "id"))
        if not await webhooks.remove(self._db, endpoint):
            raise errors.NotFound(f"no webhook endpoint {endpoint}")
        return _json({"id": endpoint, "removed": True})

    async def webhook_rotate(self, request: web.Request) -> web.Response:
        """A new secret (in this answer only); the previous one signs too for "overlap"."""
        sealer = self._sealer()
        endpoint = await names.webhook(self._db, _int_path(request, "id"))
        body = await _body(request) if request.can_read_body else {}
        overlap = body.get("overlap", "24h") if isinstance(body, dict) else "24h"
        try:
            until = datetime.now(UTC) + timedelta(seconds=values.positive_duration(overlap))
        except ValueError as exc:
            raise _Bad(422, f"overlap: {exc}") from None
        secret = await webhooks.rotate(self._db, sealer, endpoint, until)
        return _json({"id": endpoint, "secret": secret, "previous_until": until})

    async def webhooks_replay(self, request: web.Request) -> web.Response:
        body = await _body(request)
        if not isinstance(body, dict) or not isinstance(body.get("tenant"), str) or not isinstance(
                body.get("since"), str):  # fmt: skip
            raise _Bad(422, 'give {"tenant": ..., "since": ISO time, "endpoint": id (absent: each)}')
        try:
            since = datetime.fromisoformat(body["since"])
        except ValueError:
            raise _Bad(422, "since: an ISO 8601 time") from None
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        endpoint = body.get("endpoint")
        if endpoint is not None and (not isinstance(endpoint, int) or isinstance(endpoint, bool)):
            raise _Bad(422, "endpoint: an endpoint id")
        await self._known_tenant(body["tenant"], "tenant")
        if endpoint is not None:
            await names.webhook(self._db, endpoint, body["tenant"], field="endpoint")
        written = await webhook_outbox.replay(self._db, body["tenant"], since, endpoint)
        return _json({"tenant": body["tenant"], "written": written})

    def _sealer(self) -> vault.Vault:
        if self._s.sealer is None:
            raise _Bad(503, "no [accounts] key on this node: webhook secrets cannot be sealed here")
        return self._s.sealer

    async def account_state(self, request: web.Request) -> web.Response:
        action = request.match_info["action"]
        if action not in ("enable", "disable"):
            return _error(404, f"no action {action!r} (known: enable, disable)")
        await names.account(self._db, request.match_info["name"])
        body = await _body(request) if request.can_read_body else {}
        reason = body.get("reason") if isinstance(body, dict) else None
        released = 0
        if action == "enable":
            account, released = await control.enable(self._db, request.match_info["name"], reason, datetime.now(UTC))
        else:
            account = await accounts.disable(self._db, request.match_info["name"], reason, datetime.now(UTC))
        return _json({"name": account.name, "state": account.state.value, "released": released,
                      "acknowledged": await self._held()})  # fmt: skip

    async def accounts_list(self, request: web.Request) -> web.Response:
        now = datetime.now(UTC)
        pool = request.query.get("pool")
        if pool is not None:
            names.account_pool(pool, self._s.configured(), field="pool")
        read = {i.account: i for i in await inboxes.listing(self._db)}
        found = await accounts.usage(self._db, now, pool)
        return _json({"accounts": [views.account(u, now, read.get(u.account.id)) for u in found]})

    async def buckets(self, request: web.Request) -> web.Response:
        live_since = datetime.now(UTC) - timedelta(seconds=self._s.node_timeout)
        rows = await shaping.listing(self._db, live_since)
        return _json({"buckets": [{**{k: v for k, v in r.items() if k != "route_group"}, "group": r["route_group"]}
                                  for r in rows]})  # fmt: skip


def _reason_text(body: dict[str, Any], default: str) -> str:
    reason = body.get("reason", default)
    if not isinstance(reason, str) or not reason.strip():
        raise _Bad(422, "reason: a string")
    return reason


def _until(body: dict[str, Any], now: datetime) -> datetime | None:
    """The end that "for" (a duration: "2h") gives; None: none."""
    if body.get("for") is None:
        return None
    try:
        return now + timedelta(seconds=values.positive_duration(body["for"]))
    except ValueError as exc:
        raise _Bad(422, f"for: {exc}") from None


def _int_path(request: web.Request, name: str) -> int:
    text = request.match_info[name]
    if not text.isdigit():
        raise _Bad(404, f"{name}: a number")
    return int(text)


def _tenant(request: web.Request) -> str:
    return tenants.check_name(request.match_info["name"])


def _int(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    if not text.isdigit() or not low <= int(text) <= high:
        raise _Bad(422, f"{name}: a whole number from {low} to {high}")
    return int(text)


def _reason(text: Any) -> suppression.Reason | None:
    if text is None:
        return None
    try:
        return suppression.Reason(text)
    except ValueError:
        raise _Bad(422, f"reason: one of {', '.join(r.value for r in suppression.Reason)}") from None


def _entry(e: suppression.Entry) -> dict[str, Any]:
    return {"address": e.address, "tenant": e.tenant, "reason": e.reason.value, "detail": e.detail,
            "event": e.event, "delivery": e.delivery, "created_at": e.created_at,
            "expires_at": e.expires_at}  # fmt: skip
