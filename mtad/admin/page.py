"""The status page of the admin listener: `/` serves static/page.html (with page.js
and page.css under /page/), which reads the /v1 API and refreshes itself.

The login form posts the admin token to /page/login, which sets a cookie:
"EXPIRES.HMAC" (HMAC-SHA256 keyed by the token, so the cookie is not the token and
a new token ends it), HttpOnly, SameSite=Strict, Secure when the browser came over
TLS (here, or to a proxy that says X-Forwarded-Proto: https), for 12 hours. The
API takes the cookie for GETs only (`signed_in`): a change always wants the bearer
header, which a page of another site cannot send.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from importlib import resources

import structlog
from aiohttp import web

log = structlog.get_logger("mtad.admin")

COOKIE = "mtad_admin"
LIFETIME = 12 * 3600  # seconds a login lasts
_TYPES = {"page.html": "text/html", "page.js": "text/javascript", "page.css": "text/css"}
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def cookie(token: str, expires: int) -> str:
    """The cookie's value for a login that lasts until `expires` (Unix seconds). Sync."""
    mac = hmac.new(token.encode(), f"mtad admin page {expires}".encode(), hashlib.sha256).hexdigest()
    return f"{expires}.{mac}"


def signed_in(value: str | None, token: str, now: float | None = None) -> bool:
    """Whether a cookie's value is a login with `token` that has not expired. Sync."""
    if not value:
        return False
    expires, _, _ = value.partition(".")
    if not expires.isdigit() or int(expires) < (time.time() if now is None else now):
        return False
    return hmac.compare_digest(value.encode(), cookie(token, int(expires)).encode())


def add_routes(app: web.Application, token: str) -> None:
    """GET / and /page/{name}, POST /page/login and /page/logout; none wants the token."""
    files = {name: resources.files("mtad.admin").joinpath("static", name).read_bytes() for name in _TYPES}

    async def index(request: web.Request) -> web.Response:
        return _file(files, "page.html")

    async def static(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in files or name == "page.html":
            raise web.HTTPNotFound()
        return _file(files, name)

    async def login(request: web.Request) -> web.Response:
        if not _same_origin(request):
            log.warning("page_login_refused", client=request.remote, why="from another site")
            return web.json_response({"error": "a login from another site"}, status=403)
        given = (await request.post()).get("token")
        if not isinstance(given, str) or not hmac.compare_digest(given.strip().encode(), token.encode()):
            log.warning("page_login_refused", client=request.remote, why="wrong token")
            return web.json_response({"error": "wrong token"}, status=401)
        expires = int(time.time()) + LIFETIME
        signed = web.Response(status=204)
        signed.set_cookie(COOKIE, cookie(token, expires), max_age=LIFETIME, path="/", httponly=True,
                          secure=_tls(request), samesite="Strict")  # fmt: skip
        return signed

    async def logout(request: web.Request) -> web.Response:
        gone = web.Response(status=204)
        gone.del_cookie(COOKIE, path="/")
        return gone

    async def no_icon(request: web.Request) -> web.Response:
        return web.Response(status=204)

    app.router.add_get("/", index)
    app.router.add_get("/favicon.ico", no_icon)
    app.router.add_get("/page/{name}", static)
    app.router.add_post("/page/login", login)
    app.router.add_post("/page/logout", logout)


def _file(files: dict[str, bytes], name: str) -> web.Response:
    return web.Response(body=files[name], content_type=_TYPES[name], charset="utf-8", headers=_HEADERS)


def _same_origin(request: web.Request) -> bool:
    """Whether a request comes from the page itself: a browser says so in Sec-Fetch-Site
    (right behind a proxy too), an older one in Origin; another client says nothing."""
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("Origin")
    return origin is None or origin.partition("://")[2] == request.host


def _tls(request: web.Request) -> bool:
    """Whether the browser reached the page over TLS: here, or at a proxy that says so
    (believed: it can only make the cookie stricter)."""
    return request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
