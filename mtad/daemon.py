"""The composition root: builds everything from the settings, runs it in one
TaskGroup, reloads what can change on SIGHUP (`_reconfigure`), and shuts it down
in order on SIGTERM or SIGINT.

Start: one daemon per spool, checked before anything is touched (the embedded
data directory's lock, mtad.db.owner; then the node id's claim on the database,
nodes.Claim: a second `mtad run` is refused and names the first) -> database
(embedded or DSN) -> migrations -> pool -> node registration (and what the
node's previous life held back to the queue) -> routing, delivery -> the
submission port: bound here (a failure names its address) and served by the
submission processes (mtad.submission.processes), or with [submission] processes = 0 by a
group committer (with delivery as its fast path) and server in this process ->
HTTP listeners (/metrics, the admin API with its own group committer for HTTP
injection) -> READY=1 once the port is served.

Shutdown, in order:
 1. STOPPING=1; the admin API stops (requests in flight finish); close the
    listening sockets (no new sessions).
 2. Let sessions in DATA finish, bounded by [submission] shutdown_timeout;
    refuse new DATA commands meanwhile.
 3. Tell the remaining sessions 421 and close them.
 4. Close the group committers: what they hold is committed, then they return.
    (Steps 2-4 happen in each submission process, which then exits.)
 5. Stop delivery: no more leasing, deliveries on the wire finish (bounded by
    [delivery] shutdown_timeout), leases of what did not start are handed back.
 6. Stop the background loops, deregister the node, close HTTP and the pool.
 7. Stop the embedded PostgreSQL, if mtad runs one; then let go of its data
    directory (another `mtad run` may start on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import os
import re
import signal
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from mtad import config, db, submission
from mtad.admin import api
from mtad.base import errors, http, log, metrics, vault
from mtad.base.endpoints import HostPort
from mtad.base.tasks import Loop
from mtad.db import embedded, opening, owner
from mtad.deliver import delivery
from mtad.deliver import on_node as deliver_node
from mtad.feedback import inbound, on_node, suppression, tracking_http, unsubscribe, verp
from mtad.signing import on_node as signing_node
from mtad.spool import commit, leases, nodes, quotas, retention, suspensions, tenants
from mtad.spool import controls as node_controls
from mtad.submission import port, processes

logger = structlog.get_logger("mtad.daemon")

WATCH_INTERVAL = 1.0  # seconds between looks at whether the embedded PostgreSQL still runs
RESTART_BACKOFF = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 30.0, 30.0)  # waits after each failed restart, then give up
CONTROLS_EVERY = 2.0  # seconds between reads of the operator's controls, should a NOTIFY be lost


def notify(message: str) -> None:
    """Tell systemd (sd_notify protocol) when NOTIFY_SOCKET is set; otherwise nothing."""
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return
    if path.startswith("@"):
        path = "\0" + path[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.connect(path)
            sock.sendall(message.encode())
    except OSError as exc:
        logger.warning("sd_notify_failed", error=str(exc))


class Daemon:
    """One mtad node: the submission port, the spool writer, delivery, HTTP and retention."""

    def __init__(self, settings: config.Settings) -> None:
        self.settings = settings
        self._stop = asyncio.Event()
        self._reload = asyncio.Event()  # SIGHUP: read the configuration again
        self._quiet: set[str] = set()  # the tenants whose senders get no non-delivery report
        self._closing: list[db.Database] = []
        self._failure: errors.MtadError | None = None  # what stopped the node: raised once it has stopped
        self._lock: owner.SpoolLock | None = None  # the embedded data directory's, held while the daemon runs
        self._claim: nodes.Claim | None = None  # the node id's, on the database

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        """Run until stop() (or a signal); raises what made start-up fail (SpoolInUse,
        before anything was touched, when another daemon owns the spool)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop)
        loop.add_signal_handler(signal.SIGHUP, self._reload.set)
        base = self.settings.database
        try:
            if base.dsn is None:  # the data directory is this process's, or it touches nothing
                self._lock = await asyncio.to_thread(
                    owner.SpoolLock.take, base.data_dir, self.settings.source, _configured(self.settings)
                )
            async with opening.open_spool(base.dsn, base.data_dir, base.pool_size, lock=self._lock,
                                          before_migrations=self._claim_node) as opened:  # fmt: skip
                await self._serve(opened.database, opened.server)
            if self._failure is not None:
                raise self._failure
        finally:
            if self._claim is not None:
                await self._claim.release()
            if self._lock is not None:
                self._lock.release()  # after the server it owns has stopped
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
            log.flush()

    async def _claim_node(self, dsn: str) -> None:
        """The node id is this process's on the database (before migrations, before its
        row is written), or SpoolInUse names the process that has it."""
        self._claim = await nodes.Claim.take(dsn, self.settings.node.id)

    async def _announce(self, database: db.Database, listening: dict[str, list[str]]) -> None:
        """Where this node listens, for a second `mtad run` refused to name: in the
        data directory's lock, and on the node's row."""
        if self._lock is not None:
            self._lock.announce(listening)
        try:
            await nodes.listening(database, self.settings.node.id, listening)
        except errors.SpoolError as exc:
            logger.warning("listening_not_recorded", error=str(exc))

    async def _serve(self, database: db.Database, server: embedded.EmbeddedPostgres | None) -> None:
        settings = self.settings
        node_id = settings.node.id
        await nodes.register(database, node_id, _now(), delivers=settings.delivery.enabled)
        await self._reclaim(database, node_id)
        out = settings.delivery
        roads = deliver_node.routes(database, out)
        keys = settings.accounts
        sealer = vault.Vault.configured(keys.key_file, keys.key_env, keys.make)
        signing = await signing_node.on_node(database, roads.resolver, sealer, settings.dkim,
                                             processes=out.dkim_processes, delivers=out.enabled)  # fmt: skip
        tokens = unsubscribe.tokens(settings.unsubscribe)
        tracking = tracking_http.configured(settings.tracking, settings.unsubscribe)
        states = tenants.States(database)  # paused, on probation: read again by the gate's task
        controls = suspensions.Controls(database)  # the operator's suspensions and reroutes
        await controls.load(_now())
        handed = port_settings(settings, database.dsn)
        gate = handed.gate(database, states)
        # What a reload applies, in order: the first may refuse (ConfigError) before anything changed.
        reloads: list[Callable[[config.Settings], None]] = []
        delivering = None
        if out.enabled:
            url = settings.unsubscribe.url
            links = unsubscribe.Unsubscribing(tokens, url) if tokens is not None and url is not None else None
            delivering = await deliver_node.on_node(
                database, out, roads, signing.signer, pool_size=settings.database.pool_size,
                hostname=settings.submission.hostname, sealer=sealer, verp=verp.configured(settings.bounces),
                unsubscribing=links, on_probation=states.on_probation, controls=controls, tracking=tracking,
            )  # fmt: skip
            self._closing.append(delivering.pool)
            reloads.append(lambda new: delivering.reconfigure(new.delivery))
        engine = delivering.engine if delivering is not None else None
        metrics.watch_pools([database, *self._closing])  # their use is read at every scrape
        sub = settings.submission
        accepting: port.InProcess | processes.Processes
        bound = _bind("[submission] listen", sub.listen)  # here: a child is handed them, or this process serves them
        if sub.processes:
            accepting = processes.Processes(handed, bound, sub.processes, fast_path=engine)
        else:
            accepting = port.InProcess(handed, database, roads.router, fast_path=engine, gate=gate)
        reloads += [
            lambda new: roads.reconfigure(new.delivery),
            lambda new: accepting.reconfigure(port_settings(new, database.dsn)),
            lambda new: gate.reconfigure(_quotas(new.submission), new.submission.default_quota),
        ]
        listeners: list[_Listening] = []  # started in this order once the port is served; stopped last
        if settings.http.listen is not None:
            web = http.Listener(http.observability(
                depth=lambda: commit.depth(database),
                healthy=lambda: _healthy(database),
                others=accepting.counts,
            ))  # fmt: skip
            listeners.append(_Listening("http", "[http] listen", [settings.http.listen], web))
        injecting = None  # the admin API's own group committer: HTTP injection
        admin = None
        if settings.admin.token is not None:
            injecting = commit.committer(database, settings.spool, fast_path=engine)
            refusing = any(t.refuse_suppressed for t in sub.tenant_defaults.values())
            checker = suppression.Checker(database) if refusing else None
            acceptor = submission.Acceptor(sub, injecting, gate, router=roads.router, suppressions=checker)
            reloads.append(lambda new: setattr(acceptor, "settings", new.submission))
            admin = http.Listener(api.application(api.Services(
                database, settings.admin.token, acceptor, sub.default_tenant, settings.limits,
                3 * settings.node.heartbeat_interval, sealer, configured=lambda: config.names(self.settings),
            )))  # fmt: skip
            listeners.append(_Listening("admin", "[admin] listen", [settings.admin.listen], admin))
        if tokens is not None and settings.unsubscribe.listen:  # the one-click unsubscribe endpoint
            answering = unsubscribe.app(tokens, functools.partial(unsubscribe.record, database))
            if tracking is not None:  # and the tracking links: /o/ and /c/
                tracking_http.add_routes(answering, tracking.tokens, functools.partial(
                    tracking_http.record, database, settings.tracking), settings.tracking.proxies)  # fmt: skip
            leaving = http.Listener(answering)
            listeners.append(_Listening("unsubscribe", "[unsubscribe] listen", settings.unsubscribe.listen, leaving))
        if settings.inbound.listen:  # bounces and complaints
            reading = inbound.Inbound(settings.inbound, database, verp.configured(settings.bounces), rules=out.rules)
            listeners.append(_Listening("inbound", "[inbound] listen", settings.inbound.listen, reading))
            reloads.append(lambda new: setattr(reading, "rules", new.delivery.rules))
        try:
            async with asyncio.TaskGroup() as tasks:
                serving = tasks.create_task(accepting.run(), name="submission")
                running = tasks.create_task(engine.run(), name="delivery") if engine else None
                self._quiet = {t for t, d in settings.submission.tenant_defaults.items() if not d.dsn}
                feedback = on_node.on_node(database, _feedback(settings), node_id, sealer, out.rules,
                                           reports_to=lambda tenant: tenant not in self._quiet)  # fmt: skip
                reloads.append(lambda new: feedback.reconfigure(_feedback(new)))
                # An operator's command holds on this node once it is applied here and in
                # every submission process: the command waits for the acknowledgement.
                apply = functools.partial(_apply_controls, controls, gate, accepting, engine)
                loops: list[Loop] = [
                    ("heartbeat", functools.partial(self._heartbeat, database, node_id)),
                    ("tenant-states", gate.run),
                    ("suspensions", functools.partial(controls.run, CONTROLS_EVERY)),
                    ("controls", node_controls.Heeding(database, node_id, apply, every=CONTROLS_EVERY).run),
                    ("reload", functools.partial(self._reloading, database, reloads)),
                    *feedback.loops, *signing.loops, *(delivering.loops if delivering is not None else []),
                ]  # fmt: skip
                if settings.retention.enabled:  # at most one node prunes at a time (retention.LOCK_KEY)
                    history = out.relay.breaker.window  # the breaker reads account history this far back
                    pruner = retention.Pruner(database, settings.retention, account_history=history,
                                              soft_window=settings.suppression.soft_window)  # fmt: skip
                    loops.append(("retention", pruner.run))
                if server is not None:  # it is mtad's: started again when it dies
                    loops.append(("embedded-postgres", functools.partial(self._watch, server)))
                background = [tasks.create_task(run(), name=name) for name, run in loops]
                injected = tasks.create_task(injecting.run(), name="injection") if injecting else None
                await (accepting.start(bound) if isinstance(accepting, port.InProcess) else accepting.start())
                for listening in listeners:
                    await _listen(listening.key, listening.listen, listening.start())
                addresses = [str(a) for a in accepting.addresses]
                found = {x.what: [str(a) for a in x.server.addresses] for x in listeners}
                logger.info(
                    "ready", node=node_id, smtp=addresses, processes=sub.processes,
                    http=found.get("http", [None])[0], admin=found.get("admin", [None])[0],
                    unsubscribe=found.get("unsubscribe"), inbound=found.get("inbound"), pid=os.getpid(),
                )  # fmt: skip
                await self._announce(database, {"submission": addresses} | {
                    what: found.get(what, []) for what in ("http", "admin", "unsubscribe", "inbound")
                })  # fmt: skip
                notify(f"READY=1\nSTATUS=accepting on {', '.join(addresses)}")
                await self._stop.wait()

                logger.info("stopping")
                notify("STOPPING=1")
                if admin is not None:
                    await admin.stop()  # requests in flight finish; nothing new comes over HTTP
                await accepting.stop()  # steps 1-4, here or in each submission process
                await serving
                if injecting is not None and injected is not None:
                    injecting.close()
                    await injected
                if engine is not None and running is not None:
                    engine.stop()  # stop leasing; finish what is on the wire; hand back the rest
                    await running
                for task in background:
                    task.cancel()
        finally:
            accepting.close()
            for listening in listeners:
                await listening.server.stop()
            if injecting is not None:
                injecting.close()
            for pool in self._closing:
                await pool.close()
            with contextlib.suppress(errors.SpoolError):
                await nodes.deregister(database, node_id)
            await signing.signer.close()
            await roads.policies.close()
        logger.info("stopped")

    async def _reloading(self, database: db.Database, reloads: list[Callable[[config.Settings], None]]) -> None:
        """On each SIGHUP (`mtad reload`), read the configuration again and apply what
        can change while running; record what it came to on the node's row."""
        while True:
            await self._reload.wait()
            self._reload.clear()
            result = self._reconfigure(reloads)
            if result["ok"]:
                logger.info("reloaded", restart=result["restart"])
            else:
                logger.error("reload_refused", problems=result["problems"])
            if result["restart"]:
                logger.warning("reload_needs_restart", keys=result["restart"])
            try:
                await nodes.reloaded(database, self.settings.node.id, _now(), result)
            except errors.SpoolError as exc:
                logger.warning("reload_not_recorded", error=str(exc))

    def _reconfigure(self, reloads: list[Callable[[config.Settings], None]]) -> dict[str, Any]:
        """The configuration file read again and applied, whole or not at all (a bad
        file leaves the running configuration as it is): tenants' settings and quotas,
        limits, routes, pools, reply rules, the account pools' defaults, the reputation
        limits. Sessions, leases and the buckets' learnt rates stay. Returns
        {"ok", "problems", "restart": the keys that change only with a restart}."""
        old = self.settings
        try:
            new = config.load(old.source)
            for reload in reloads:
                reload(new)
        except errors.ConfigError as exc:
            return {"ok": False, "problems": exc.problems, "restart": []}
        self._quiet = {t for t, d in new.submission.tenant_defaults.items() if not d.dsn}
        restart = config.restart_only(old, new)
        self.settings = new
        return {"ok": True, "problems": [], "restart": restart}

    async def _reclaim(self, database: db.Database, node_id: str) -> None:
        """What the node held when its previous life died goes back to the queue now,
        not when its leases expire (this process holds the node id's claim: no other
        live process has it)."""
        reclaimed = await leases.reclaim(database, node_id, _now())
        if reclaimed:
            logger.info("leases_reclaimed", node=node_id, count=reclaimed)
            await database.execute("leases/notify_due")

    async def _watch(self, server: embedded.EmbeddedPostgres) -> None:
        """Start the embedded PostgreSQL again when it dies (its crash recovery is its
        own); the pools reconnect by themselves. When it cannot be started after
        RESTART_BACKOFF, the node stops and mtad exits non-zero, for systemd to act."""
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            if await asyncio.to_thread(server.is_running):
                continue
            logger.error("embedded_postgres_died", data_dir=str(server.data_dir))
            for attempt, backoff in enumerate(RESTART_BACKOFF, start=1):
                try:
                    await asyncio.to_thread(server.start)
                except errors.EmbeddedDatabaseError as exc:
                    logger.warning(
                        "embedded_postgres_restart_failed", attempt=attempt, retry_in=backoff, error=str(exc)
                    )
                    await asyncio.sleep(backoff)
                else:
                    logger.warning("embedded_postgres_restarted", attempt=attempt, data_dir=str(server.data_dir))
                    break
            else:
                self._failure = errors.EmbeddedDatabaseError(
                    f"the embedded PostgreSQL in {server.data_dir} died and could not be started again"
                )
                logger.error("embedded_postgres_lost", data_dir=str(server.data_dir), attempts=len(RESTART_BACKOFF))
                self.stop()
                return

    async def _heartbeat(self, database: db.Database, node_id: str) -> None:
        """The node's heartbeat, and its claim on its id kept (taken again after the
        database restarted); should another process have claimed the id meanwhile,
        the node stops and mtad exits non-zero."""
        while True:
            await asyncio.sleep(self.settings.node.heartbeat_interval)
            try:
                if self._claim is not None:
                    await self._claim.keep()
                await nodes.heartbeat(database, node_id, _now())
            except errors.SpoolInUse as exc:
                logger.error("node_id_taken", node=node_id, error=str(exc))
                self._failure = exc
                self.stop()
                return
            except errors.SpoolError as exc:
                logger.warning("heartbeat_failed", error=str(exc))


def _configured(settings: config.Settings) -> dict[str, list[str]]:
    """The addresses the configuration asks to listen on (before they are bound)."""
    found = {
        "submission": [str(a) for a in settings.submission.listen],
        "http": [str(settings.http.listen)] if settings.http.listen is not None else [],
        "admin": [str(settings.admin.listen)] if settings.admin.token is not None else [],
        "unsubscribe": [str(a) for a in settings.unsubscribe.listen],
        "inbound": [str(a) for a in settings.inbound.listen],
    }
    return {what: addresses for what, addresses in found.items() if addresses}


def _bind(key: str, addresses: Sequence[HostPort]) -> list[socket.socket]:
    """The listening sockets of `addresses`, bound one address at a time so that a
    failure names its own: ListenError, with nothing left open."""
    bound: list[socket.socket] = []
    for address in addresses:
        try:
            bound.extend(submission.bind([address]))
        except OSError as exc:
            for sock in bound:
                sock.close()
            raise errors.ListenError(_cannot_listen(key, [address], exc)) from None
    return bound


async def _apply_controls(
    controls: suspensions.Controls, gate: quotas.Gate, accepting: port.InProcess | processes.Processes,
    engine: delivery.Delivery | None,
) -> None:  # fmt: skip
    """The operator's controls applied on this node: the suspensions and reroutes, the
    tenants' states here and in every submission process; then delivery looks again
    at what it holds and leases what a resume made due. MtadError when one could not."""
    await controls.load(_now())
    await gate.refresh()
    await gate.settle(quotas.SETTLE_WITHIN)  # what passed the gate before is committed, or given up
    await accepting.heed()
    if engine is not None:
        engine.controls_changed()


async def _listen(key: str, addresses: Sequence[HostPort], start: Awaitable[None]) -> None:
    """await start (a listener binding `addresses`), a failure named: ListenError."""
    try:
        await start
    except OSError as exc:
        raise errors.ListenError(_cannot_listen(key, addresses, exc)) from None


def _cannot_listen(key: str, addresses: Sequence[HostPort], exc: OSError) -> str:
    """`cannot listen on 127.0.0.1:2525 ([submission] listen): address already in use
    (another process listens there)`; of several addresses, the one asyncio names."""
    where = [str(a) for a in addresses]
    named = re.search(r"address \('([^']*)', (\d+)", str(exc))
    if named is not None and len(where) > 1:
        where = [str(HostPort(named.group(1), int(named.group(2))))]
    if exc.errno == errno.EADDRINUSE:
        why = "address already in use (another process listens there: `ss -ltnp` names it)"
    elif exc.errno == errno.EACCES:
        why = "permission denied (a port below 1024 needs CAP_NET_BIND_SERVICE)"
    elif exc.errno == errno.EADDRNOTAVAIL:
        why = "no such address on this host"
    else:
        why = str(exc.strerror or exc).lower()
    return f"cannot listen on {', '.join(where)} ({key}): {why}"


async def _healthy(database: db.Database) -> bool:
    try:
        async with asyncio.timeout(2.0):
            await database.fetchval("admin/ping")
    except (errors.SpoolError, TimeoutError):
        return False
    return True


@dataclass(frozen=True, slots=True)
class _Listening:
    """A listener besides the submission port: what the ready line and the lock call it,
    the key it listens by, where, and the server."""

    what: str
    key: str
    listen: Sequence[HostPort]
    server: http.Listener | inbound.Inbound

    async def start(self) -> None:
        if isinstance(self.server, http.Listener):
            await self.server.start(self.listen)
        else:
            await self.server.start()  # it listens where its settings say (self.listen)


def _quotas(sub: submission.Settings) -> dict[str, quotas.Quota]:
    """The tenants' own quotas."""
    return {tenant: defaults.quota for tenant, defaults in sub.tenant_defaults.items()}


def _feedback(settings: config.Settings) -> on_node.Sections:
    """What the feedback layer reads of the configuration."""
    return on_node.Sections(
        settings.suppression, settings.consumers.enabled, settings.webhooks, settings.reputation, settings.inbox,
        settings.delivery.relay, settings.submission.hostname, settings.delayed_after,
    )  # fmt: skip


def port_settings(settings: config.Settings, dsn: str) -> port.PortSettings:
    """What the submission port needs of the configuration (all a child is handed)."""
    out = settings.delivery
    return port.PortSettings(
        submission=settings.submission,
        spool=settings.spool,
        log_format=settings.log.format,
        log_level=settings.log.level,
        dsn=dsn,
        pool_size=settings.database.pool_size,
        nameservers=out.nameservers,
        dns_timeout=out.dns_timeout,
        providers=out.providers,
        routes=out.routes,
        port=out.sessions.port,
        node=out.engine.node,
        lease_duration=out.engine.lease_duration,
    )


def _now() -> datetime:
    return datetime.now(UTC)
