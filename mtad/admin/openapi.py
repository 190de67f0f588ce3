"""The OpenAPI 3.1 document of the admin API, served at /v1/openapi.json."""

from __future__ import annotations

from typing import Any

_ERROR = {
    "description": "what went wrong",
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
}
_OK = {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}


def _op(summary: str, *, body: str | None = None, params: list[dict[str, Any]] | None = None,
        ok: str = "200", secured: bool = True) -> dict[str, Any]:  # fmt: skip
    op: dict[str, Any] = {"summary": summary, "responses": {ok: _OK, "4XX": _ERROR, "5XX": _ERROR}}
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": {"$ref": body}}}}
    if params:
        op["parameters"] = params
    if not secured:
        op["security"] = []
    return op


def _path(name: str, about: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": about, "schema": {"type": "string"}}


def _query(name: str, about: str) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": about, "schema": {"type": "string"}}


_FILTERS = [
    _query("state", "one state: queued, leased, deferred, delivered, bounced, failed, cancelled, unknown, held "
                    "(default: every state but the final ones)"),
    _query("tenant", "a tenant"),
    _query("provider", "the provider group of the last attempt ('-': never attempted)"),
    _query("domain", "the recipient domain"),
    _query("older_than", 'accepted at least this long ago ("30m", "2h", "3d")'),
]  # fmt: skip
_STRING = {"type": "string"}
# The pattern of mtad.spool.campaigns.NAME.
_CAMPAIGN = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:+-]{0,63}$",
             "description": "the tenant's campaign, made on first use"}  # fmt: skip

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "mtad admin API", "version": "1",
             "description": "The operations of the mtad command line over HTTP, and HTTP injection of mail. "
                            "A change of what may be sent or submitted (a tenant paused or resumed, a "
                            "suspension, a reroute, an account enabled or disabled) is answered once every "
                            "live node holds it, with \"acknowledged\": {\"version\", \"live\", \"applied\": "
                            "[nodes], \"late\": [nodes that did not within 5 s]}."},
    "security": [{"bearer": []}],
    "paths": {
        "/v1/openapi.json": {"get": _op("This document", secured=False)},
        "/v1/messages": {"post": {
            **_op("Inject a message: raw with its envelope, or structured; 202 only after its COMMIT",
                  body="#/components/schemas/Message", ok="202"),
            "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                            "description": "a resubmission with the same key gets the first one's queue id",
                            "schema": {"type": "string"}}],
        }},
        "/v1/queue": {"get": _op("Deliveries still to be done (or in every state, or in one), oldest first, a page "
                                 "at a time: {deliveries, next_cursor (null: the last page), totals (first page "
                                 "only: total and by state)}", params=[
            *_FILTERS, _query("all", "true: every state, final ones too"),
            _query("limit", "at most this many (1-1000, default 100)"),
            _query("cursor", "next_cursor of the page before")])},
        "/v1/queue/summary": {"get": _op("qshape: the deliveries still to be done counted by key and by age since "
                                         "accepted (buckets: 5m is under 5 minutes, 10m 5 to 10, ... 1280m+), "
                                         "with the oldest and the next due; the total first", params=[
            _query("by", "provider (default), state, domain, tenant, source or pool"), *_FILTERS])},
        "/v1/queue/{action}": {"post": _op("Retry, cancel, bounce, hold or release every delivery the body's "
                                           "filters match (or \"all\": true), in batches; {count, was: by state}, "
                                           "or with \"dry_run\": true {count, would, left, sending}",
                                           body="#/components/schemas/QueueAction",
                                           params=[_path("action", "retry, cancel, bounce, hold or release")])},
        "/v1/queue/{id}": {"get": _op("A message (queue id, or a delivery id) with its deliveries and events",
                                      params=[_path("id", "queue id or delivery id")])},
        "/v1/queue/{id}/{action}": {"post": _op("Retry, cancel, bounce, hold or release a delivery, or every "
                                                "delivery of a message", params=[
            _path("id", "queue id or delivery id"), _path("action", "retry, cancel, bounce, hold or release")])},
        "/v1/tenants": {"get": _op("The tenants"),
                        "post": _op("Add a tenant that authenticates with its password",
                                    body="#/components/schemas/Tenant", ok="201")},
        "/v1/tenants/{name}": {"get": _op("A tenant's state, probation, quotas and reputation windows",
                                          params=[_path("name", "tenant")])},
        "/v1/tenants/{name}/pause": {"post": _op("Pause a tenant: its mail waits, new mail is refused",
                                                 params=[_path("name", "tenant")],
                                                 body="#/components/schemas/Pause")},
        "/v1/tenants/{name}/resume": {"post": _op("Resume a paused tenant", params=[_path("name", "tenant")])},
        "/v1/campaigns": {"get": _op("The campaigns and their progress", params=[_query("tenant", "only this "
                                                                                     "tenant's")]),
                          "post": _op("Make a campaign (mail naming one not made yet makes it too)",
                                      body="#/components/schemas/Campaign", ok="201")},
        "/v1/campaigns/{name}": {"get": _op("A campaign's progress: deliveries by state, what came back, the rate "
                                            "of the last 10 minutes, when it should end", params=[
            _path("name", "campaign"), _query("tenant", "its tenant (absent: the default tenant)")])},
        "/v1/campaigns/{name}/{action}": {"post": _op("Pause (its mail waits on every node), resume, cancel "
                                                      "(what it has not sent) a campaign, or set its limits "
                                                      '({"max_per_hour", "max_per_day"})', params=[
            _path("name", "campaign"), _path("action", "pause, resume, cancel or limit"),
            _query("tenant", "its tenant (absent: the default tenant)")], body="#/components/schemas/CampaignAction")},
        "/v1/reputation": {"get": _op("The sliding windows (1 h, 24 h) of outcomes", params=[
            _query("scope", "tenant, provider or source"), _query("tenant", "only this tenant's mail")])},
        "/v1/suppressions": {
            "get": _op("Suppressed addresses", params=[
                _query("tenant", "one tenant's list (absent: every list)"),
                _query("reason", "hard_bounce, soft_bounce, complaint, unsubscribe, manual")]),
            "post": _op("Suppress an address", body="#/components/schemas/Suppression", ok="201"),
        },
        "/v1/suppressions/{address}": {"delete": _op("Remove an address from a list", params=[
            _path("address", "the address"), _query("tenant", "the tenant's list (absent: the global list)")])},
        "/v1/suspensions": {
            "get": _op("The suspensions and reroutes in force"),
            "post": _op("Suspend a provider group's, tenant's, pool's or address's mail, or an account",
                        body="#/components/schemas/Suspend", ok="201"),
        },
        "/v1/suspensions/{kind}/{key}": {"delete": _op("Resume: what the suspension held is due now", params=[
            _path("kind", "provider, tenant, pool, source or account"), _path("key", "what was suspended")])},
        "/v1/reroutes": {"post": _op("Send a provider group's mail from another source pool",
                                     body="#/components/schemas/Reroute", ok="201")},
        "/v1/reroutes/{provider}": {"delete": _op("End a reroute", params=[_path("provider", "provider group")])},
        "/v1/webhooks": {
            "get": _op("Webhook endpoints (never a secret)", params=[_query("tenant", "one tenant's")]),
            "post": _op("Add a tenant's endpoint: its secret is in this answer only",
                        body="#/components/schemas/Webhook", ok="201"),
        },
        "/v1/webhooks/{id}": {"delete": _op("Remove an endpoint", params=[_path("id", "endpoint id")])},
        "/v1/webhooks/{id}/rotate-secret": {"post": _op(
            "A new secret (in this answer only); the previous one signs too for the overlap",
            params=[_path("id", "endpoint id")])},
        "/v1/webhooks/replay": {"post": _op("Send a tenant's events since a time to its endpoints again",
                                            body="#/components/schemas/Replay")},
        "/v1/accounts": {"get": _op("Sending accounts and their use (never a secret)",
                                    params=[_query("pool", "one account pool")])},
        "/v1/accounts/{name}/{action}": {"post": _op("Enable or disable a sending account", params=[
            _path("name", "account"), _path("action", "enable or disable")])},
        "/v1/buckets": {"get": _op("The shaping buckets per (provider group, source address)")},
        "/v1/queue/overview": {"get": _op("The deliveries still to be done by state and by provider group, with "
                                          "the oldest and the next due, as counted at its now: one pass over "
                                          "deliveries alone, at most once every 10 s for every reader")},
        "/v1/rate": {"get": _op("Delivered, deferred and hard-bounced per minute over every tenant, oldest first",
                                params=[_query("minutes", "how many minutes back, 1 to 1440 (default 60)")])},
        "/v1/nodes": {"get": _op("The registered nodes, each live or not by its heartbeat")},
        "/v1/warmup": {"get": _op("The stored warm-up days: a row per warming address and provider")},
    },
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                       "description": "the token in [admin] token_file"},
                            "page": {"type": "apiKey", "in": "cookie", "name": "mtad_admin",
                                     "description": "the status page's login (POST /page/login): GETs only"}},
        "schemas": {
            "QueueAction": {"type": "object", "additionalProperties": False, "properties": {
                "state": _STRING, "tenant": _STRING, "provider": _STRING, "domain": _STRING, "older_than": _STRING,
                "all": {"type": "boolean", "description": "every delivery the action takes, no filter"},
                "dry_run": {"type": "boolean", "description": "only count what it would do"}}},
            "Error": {"type": "object", "required": ["error"], "properties": {
                "error": {"type": "string"}, "smtp": {"type": "string", "description": "the SMTP reply it would be"},
                "field": {"type": "string",
                          "description": 'the field of the body or query at fault (a 400 or 422): "to[1]"'},
                "did_you_mean": {"type": ["string", "null"],
                                 "description": "a name that names nothing: the closest known name"},
            }},
            "Message": {"oneOf": [
                {"type": "object", "required": ["envelope_sender", "recipients", "content"], "properties": {
                    "envelope_sender": {"type": "string", "description": '"" for the null sender'},
                    "recipients": {"type": "array", "items": {"type": "string"}},
                    "content": {"type": "string", "description": "the RFC 5322 message"},
                    "tenant": {"type": "string"}, "campaign": _CAMPAIGN,
                }, "additionalProperties": False},
                {"type": "object", "required": ["from"], "properties": {
                    "from": {"type": "string"}, "to": {"type": "array", "items": {"type": "string"}},
                    "cc": {"type": "array", "items": {"type": "string"}},
                    "bcc": {"type": "array", "items": {"type": "string"}},
                    "reply_to": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
                    "subject": {"type": "string"},
                    "text": {"type": "string"}, "html": {"type": "string"},
                    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
                    "attachments": {"type": "array", "items": {"type": "object", "required": ["filename", "content"],
                                                               "properties": {
                        "filename": {"type": "string"}, "content_type": {"type": "string"},
                        "content": {"type": "string", "contentEncoding": "base64"}}}},
                    "envelope_sender": {"type": "string"}, "tenant": {"type": "string"}, "campaign": _CAMPAIGN,
                }, "additionalProperties": False},
            ]},
            "Pause": {"type": "object", "properties": {"reason": {"type": "string"}}},
            "CampaignAction": {"type": "object", "properties": {
                "reason": {"type": "string"}, "max_per_hour": {"type": ["integer", "null"], "minimum": 1},
                "max_per_day": {"type": ["integer", "null"], "minimum": 1}}},
            "Campaign": {"type": "object", "required": ["name"], "properties": {
                "name": _CAMPAIGN, "tenant": {"type": "string"},
                "max_per_hour": {"type": ["integer", "null"], "minimum": 1},
                "max_per_day": {"type": ["integer", "null"], "minimum": 1}}},
            "Tenant": {"type": "object", "required": ["name", "password"], "properties": {
                "name": {"type": "string"}, "password": {"type": "string"}}},
            "Webhook": {"type": "object", "required": ["tenant", "url"], "properties": {
                "tenant": {"type": "string"}, "url": {"type": "string"},
                "events": {"type": "array", "items": {"type": "string"}}, "batch": {"type": "integer"}}},
            "Replay": {"type": "object", "required": ["tenant", "since"], "properties": {
                "tenant": {"type": "string"}, "since": {"type": "string", "format": "date-time"},
                "endpoint": {"type": "integer"}}},
            "Suspend": {"type": "object", "required": ["kind", "key"], "properties": {
                "kind": {"type": "string", "enum": ["provider", "tenant", "pool", "source", "account"]},
                "key": {"type": "string"}, "reason": {"type": "string"},
                "for": {"type": "string", "description": 'a duration, e.g. "2h" (absent: until resumed)'},
            }},
            "Reroute": {"type": "object", "required": ["provider", "pool"], "properties": {
                "provider": {"type": "string"}, "pool": {"type": "string"}, "reason": {"type": "string"},
                "for": {"type": "string"},
            }},
            "Suppression": {"type": "object", "required": ["address"], "properties": {
                "address": {"type": "string"}, "tenant": {"type": "string"},
                "reason": {"type": "string",
                           "enum": ["hard_bounce", "soft_bounce", "complaint", "unsubscribe", "manual"]},
                "note": {"type": "string"},
            }},
        },
    },
}  # fmt: skip
