"""MTA-STS and DANE on outbound delivery: policies served over real HTTPS by a
test CA's certificate (trusted through ca_file), MX sinks with a certificate
valid for their name, one valid for another name, and none (no STARTTLS)."""

from __future__ import annotations

import argparse
import asyncio
import email
import email.policy
import gzip
import hashlib
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from mtad import config, db
from mtad.cli import common
from mtad.cli import tls as tls_cli
from mtad.deliver import delivery
from mtad.outbound import fetching, mtasts, outcomes, policies, routing, sessions, tlsrpt
from tests.certs import Authority
from tests.integration.delivering import PROVIDERS, RULES, accept, deliveries, new_message
from tests.pg import query
from tests.sink import Sink
from tests.zones import ZoneResolver

GOOD, WRONG, PLAIN = "127.0.0.2", "127.0.0.3", "127.0.0.4"  # the three kinds of receiver
ENFORCE = "version: STSv1\nmode: enforce\nmx: {mx}\nmax_age: 86400\n"
ZONE = f"""
enforce.test.             MX 10 mx.enforce.test.
mx.enforce.test.          A  {GOOD}
_mta-sts.enforce.test.    TXT "v=STSv1; id=e1"
mta-sts.enforce.test.     A  127.0.0.1
unlisted.test.            MX 5 plain.unlisted.test.
unlisted.test.            MX 10 mx.unlisted.test.
plain.unlisted.test.      A  {PLAIN}
mx.unlisted.test.         A  {GOOD}
_mta-sts.unlisted.test.   TXT "v=STSv1; id=u1"
mta-sts.unlisted.test.    A  127.0.0.1
wrongname.test.           MX 10 mx.wrongname.test.
mx.wrongname.test.        A  {WRONG}
_mta-sts.wrongname.test.  TXT "v=STSv1; id=w1"
mta-sts.wrongname.test.   A  127.0.0.1
nostarttls.test.          MX 10 mx.nostarttls.test.
mx.nostarttls.test.       A  {PLAIN}
_mta-sts.nostarttls.test. TXT "v=STSv1; id=n1"
mta-sts.nostarttls.test.  A  127.0.0.1
testing.test.             MX 10 mx.testing.test.
mx.testing.test.          A  {WRONG}
_mta-sts.testing.test.    TXT "v=STSv1; id=t1"
mta-sts.testing.test.     A  127.0.0.1
nomatch.test.             MX 10 mx.nomatch.test.
mx.nomatch.test.          A  {GOOD}
_mta-sts.nomatch.test.    TXT "v=STSv1; id=m1"
mta-sts.nomatch.test.     A  127.0.0.1
nopolicy.test.            MX 10 mx.nopolicy.test.
mx.nopolicy.test.         A  {WRONG}
"""
POLICIES = {
    "enforce.test": ENFORCE.format(mx="mx.enforce.test"),
    "unlisted.test": ENFORCE.format(mx="mx.unlisted.test"),
    "wrongname.test": ENFORCE.format(mx="*.wrongname.test"),
    "nostarttls.test": ENFORCE.format(mx="mx.nostarttls.test"),
    "nomatch.test": ENFORCE.format(mx="mx.elsewhere.example"),
    "testing.test": "version: STSv1\nmode: testing\nmx: mx.testing.test\nmax_age: 86400\n",
}


@pytest.fixture(scope="module")
def authority() -> Authority:
    return Authority()


@pytest.fixture
def ca_file(authority: Authority, tmp_path: Path) -> Path:
    return authority.write(tmp_path / "ca.pem")


@pytest.fixture(autouse=True)
def no_ssl_cert_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test CA gets, it gets through ca_file."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)


@dataclass
class PolicyServer:
    """HTTPS at mta-sts.<domain>: each domain's policy file from `policies`."""

    port: int
    policies: dict[str, str] = field(default_factory=lambda: dict(POLICIES))
    fetched: list[str] = field(default_factory=list)
    posted: list[tuple[str, bytes]] = field(default_factory=list)  # TLS reports: (Content-Type, body)
    arrived: asyncio.Queue[str] = field(default_factory=asyncio.Queue)  # each fetch's domain, as it comes
    gate: asyncio.Event | None = None  # when given, each fetch is answered once it is set

    async def report(self, request: web.Request) -> web.Response:
        self.posted.append((request.content_type, await request.read()))
        return web.Response(status=201)

    async def handle(self, request: web.Request) -> web.Response:
        domain = request.host.split(":")[0].removeprefix("mta-sts.")
        self.fetched.append(domain)
        self.arrived.put_nowait(domain)
        if self.gate is not None:
            await self.gate.wait()
        if domain not in self.policies:
            return web.Response(status=404)
        return web.Response(text=self.policies[domain], content_type="text/plain")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def policy_server(authority: Authority, tmp_path: Path) -> AsyncIterator[PolicyServer]:
    server = PolicyServer(_free_port())
    app = web.Application()
    app.router.add_get("/.well-known/mta-sts.txt", server.handle)
    app.router.add_post("/tlsrpt", server.report)
    runner = web.AppRunner(app)
    await runner.setup()
    names = [f"mta-sts.{d}" for d in (*POLICIES, "changing.test")] + ["reports.test"]
    site = web.TCPSite(
        runner, "127.0.0.1", server.port, ssl_context=authority.server_context(tmp_path / "https", *names)
    )
    await site.start()
    yield server
    await runner.cleanup()


@dataclass
class Receivers:
    good: Sink
    wrong: Sink
    plain: Sink

    @property
    def port(self) -> int:
        return self.good.port


@pytest.fixture
async def receivers(authority: Authority, tmp_path: Path) -> AsyncIterator[Receivers]:
    good_names = ("mx.enforce.test", "mx.unlisted.test", "mx.dane.test")
    good = await Sink((GOOD,), tls=authority.server_context(tmp_path / "good", *good_names)).start()
    wrong = await Sink(
        (WRONG,), port=good.port, tls=authority.server_context(tmp_path / "wrong", "other.example")
    ).start()
    plain = await Sink((PLAIN,), port=good.port).start()
    yield Receivers(good, wrong, plain)
    for sink in (good, wrong, plain):
        await sink.stop()


def engine(
    database: db.Database, port: int, https_port: int, ca_file: Path, *, zone: str = ZONE, dane: bool = False,
    secure: set[str] | bool = False,
) -> tuple[delivery.Delivery, policies.Policies]:  # fmt: skip
    resolver = ZoneResolver(zone, secure=secure)
    router = routing.Router(resolver, PROVIDERS, port=port)
    pool = sessions.Pool(sessions.Settings(port=port, ehlo_hostname="mtad.test"),
                         verified_tls=fetching.trust(ca_file))  # fmt: skip
    settings = policies.Settings(dane=dane, https_port=https_port, ca_file=ca_file)
    tls = policies.Policies(database, resolver, settings, count_failure=tlsrpt.failures(database))
    settings = delivery.Settings(node="n1", retry=outcomes.RetrySchedule((60,), jitter=0))
    return delivery.Delivery(settings, database, router, pool, RULES, tls=tls), tls


async def send(database: db.Database, port: int, https_port: int, ca_file: Path, recipients: list[str],
               **options: Any) -> None:  # fmt: skip
    """Accept a message to each recipient, then deliver what is due through engine(...)."""
    await accept(database, *(new_message(r) for r in recipients))
    mtad, tls = engine(database, port, https_port, ca_file, **options)
    await mtad.run_until_idle()
    await tls.close()


async def events(database: db.Database, recipient: str) -> list[dict[str, object]]:
    rows = await query(database, "SELECT e.kind, e.data FROM events e JOIN deliveries d ON d.id = e.delivery"
                                 " WHERE d.recipient = $1 AND e.kind IN ('delivered', 'deferred') ORDER BY e.id",
                       recipient)  # fmt: skip
    return [{"kind": r["kind"], **json.loads(r["data"])} for r in rows]


async def test_enforce_sends_only_to_a_listed_mx_with_a_certificate_valid_for_it(
    database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path
) -> None:
    await send(database, receivers.port, policy_server.port, ca_file, ["a@enforce.test", "b@unlisted.test"])
    rows = await deliveries(database)
    assert {r["state"] for r in rows.values()} == {"delivered"}
    assert sorted(m.recipients[0] for m in receivers.good.received) == ["a@enforce.test", "b@unlisted.test"]
    assert all(m.tls for m in receivers.good.received)
    assert receivers.plain.received == []  # unlisted.test's preferred MX is not in its policy
    [event] = await events(database, "b@unlisted.test")
    assert (event["tls_policy"], event["mx"]) == ("mta-sts", "mx.unlisted.test")
    kept = await policies.cached(database, "unlisted.test")
    assert kept is not None
    assert kept.policy == mtasts.Policy(mtasts.Mode.ENFORCE, 86400, ("mx.unlisted.test",))
    assert kept.policy_id == "u1"


async def test_enforce_defers_a_wrong_certificate_or_no_starttls_and_says_why(
    database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path
) -> None:
    await send(database, receivers.port, policy_server.port, ca_file, ["c@wrongname.test", "d@nostarttls.test"])
    rows = await deliveries(database)
    assert {(r["state"], r["reason"]) for r in rows.values()} == {("deferred", "tls_failed")}
    assert receivers.wrong.received == receivers.plain.received == []  # never in clear, never unverified
    [wrong] = await events(database, "c@wrongname.test")
    assert wrong["failure"] == "tls_policy"
    assert "MTA-STS: the certificate of mx.wrongname.test is not valid for it" in str(wrong["tls_error"])
    [plain] = await events(database, "d@nostarttls.test")
    assert "mx.nostarttls.test offers no STARTTLS, which nostarttls.test's policy needs" in str(plain["tls_error"])
    kept = await policies.cached(database, "nostarttls.test")
    assert kept is not None
    assert kept.failure is not None
    assert "offers no STARTTLS" in kept.failure


async def test_enforce_with_no_mx_host_allowed_defers_without_connecting(
    database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path
) -> None:
    await send(database, receivers.port, policy_server.port, ca_file, ["k@nomatch.test"])
    row = (await deliveries(database))["k@nomatch.test"]
    assert (row["state"], row["reason"]) == ("deferred", "tls_failed")
    assert receivers.good.received == []
    assert receivers.good.connections == 0
    [event] = await events(database, "k@nomatch.test")
    assert "no MX host of nomatch.test (mx.nomatch.test) matches its policy" in str(event["tls_error"])
    [counted] = await query(database, "SELECT result, mx_host FROM tls_report_counts WHERE domain = 'nomatch.test'")
    assert dict(counted) == {"result": "validation-failure", "mx_host": "mx.nomatch.test"}


async def test_testing_mode_delivers_as_without_a_policy_and_records_the_failure(
    database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path
) -> None:
    await send(database, receivers.port, policy_server.port, ca_file, ["e@testing.test"])
    assert (await deliveries(database))["e@testing.test"]["state"] == "delivered"
    [message] = receivers.wrong.received
    assert message.tls  # opportunistic TLS, as without a policy
    [event] = await events(database, "e@testing.test")
    assert event["tls_policy"] == "mta-sts"
    assert "is not valid for it" in str(event["tls_error"])
    kept = await policies.cached(database, "testing.test")
    assert kept is not None
    assert kept.failure is not None
    assert "is not valid for it" in kept.failure


async def test_a_domain_without_a_policy_gets_opportunistic_tls(
    database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path
) -> None:
    await send(database, receivers.port, policy_server.port, ca_file, ["f@nopolicy.test"])
    assert (await deliveries(database))["f@nopolicy.test"]["state"] == "delivered"
    [event] = await events(database, "f@nopolicy.test")
    assert "tls_policy" not in event
    assert policy_server.fetched == []  # no TXT record: nothing to fetch


async def test_a_policy_is_cached_across_a_restart_and_fetched_again_when_its_id_changes(
    database: db.Database, policy_server: PolicyServer, ca_file: Path
) -> None:
    zone = ZONE + "\nchanging.test. MX 10 mx.changing.test.\nmx.changing.test. A 127.0.0.2\n"
    policy_server.policies["changing.test"] = ENFORCE.format(mx="mx.changing.test")
    route = routing.Route("changing.test", "g", PROVIDERS.default,
                          (routing.Hop("mx.changing.test", 10, (GOOD,), 25),))  # fmt: skip
    settings = policies.Settings(https_port=policy_server.port, ca_file=ca_file)
    for txt in ("v=STSv1; id=c1", "v=STSv1; id=c1", "v=STSv1; id=c2"):  # three lives of the daemon
        resolver = ZoneResolver(zone + f'_mta-sts.changing.test. TXT "{txt}"\nmta-sts.changing.test. A 127.0.0.1\n')
        tls = policies.Policies(database, resolver, settings)
        applied = await tls.of(route)
        await tls.close()
        assert applied.kind is policies.Kind.MTA_STS
        assert applied.verify["mx.changing.test"].enforce
    assert policy_server.fetched == ["changing.test", "changing.test"]  # the restart with id c1 fetched nothing
    kept = await policies.cached(database, "changing.test")
    assert kept is not None
    assert kept.policy_id == "c2"

    policy_server.policies["changing.test"] = "this is not a policy"
    resolver = ZoneResolver(zone + '_mta-sts.changing.test. TXT "v=STSv1; id=c3"\nmta-sts.changing.test. A 127.0.0.1\n')
    tls = policies.Policies(database, resolver, settings, count_failure=tlsrpt.failures(database))
    applied = await tls.of(route)  # the new one does not parse: the cached one holds until it expires
    await tls.close()
    assert applied.verify["mx.changing.test"].enforce
    kept = await policies.cached(database, "changing.test")
    assert kept is not None
    assert (kept.policy_id, kept.failure is not None) == ("c2", True)
    assert "not a 'key: value' line" in str(kept.failure)
    [counted] = await query(database, "SELECT result, mx_host, sessions FROM tls_report_counts WHERE domain = $1",
                            "changing.test")  # fmt: skip
    assert dict(counted) == {"result": "sts-policy-invalid", "mx_host": "", "sessions": 1}  # for TLS reporting


async def test_tls_show_prints_a_domains_policy(
    dsn: str, database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    await send(database, receivers.port, policy_server.port, ca_file, ["a@enforce.test"])
    path = tmp_path / "mtad.toml"
    path.write_text(f'[database]\ndsn = "{dsn}"\n')
    basics = config.load_basics(path, environ={})
    capsys.readouterr()  # the delivery's log lines
    assert await tls_cli.show(argparse.Namespace(domain="enforce.test", json=True), basics) == common.EXIT_OK
    shown = json.loads(capsys.readouterr().out)
    assert (shown["mode"], shown["mx"], shown["policy_id"], shown["expired"]) == (
        "enforce", ["mx.enforce.test"], "e1", False,
    )  # fmt: skip
    assert datetime.fromisoformat(shown["expires_at"]) > datetime.now(UTC)
    assert await tls_cli.show(argparse.Namespace(domain="enforce.test", json=False), basics) == common.EXIT_OK
    text = capsys.readouterr().out
    assert "mode          enforce" in text
    assert "last failure  none" in text
    assert await tls_cli.show(argparse.Namespace(domain="unknown.test", json=False), basics) == common.EXIT_OK
    assert "none cached" in capsys.readouterr().out


# --- DANE --------------------------------------------------------------------------------


def _tlsa(authority: Authority, directory: Path, *, match: bool) -> str:
    """A DANE-EE record (3 1 1) of the good receiver's key, or of another key."""
    pem = (directory / "good" / "chain.pem").read_bytes()
    leaf = x509.load_pem_x509_certificate(pem)
    spki = leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    digest = hashlib.sha256(spki if match else b"another key").hexdigest()
    return f"3 1 1 {digest}"


def _dane_zone(record: str, host: str = "mx.dane.test", address: str = GOOD) -> str:
    return f"dane.test. MX 10 {host}.\n{host}. A {address}\n_{{port}}._tcp.{host}. TLSA {record}\n"


@pytest.mark.parametrize(("match", "secure", "state"), [
    (True, "all", "delivered"),
    (False, "all", "deferred"),
    (False, "host", "deferred"),  # an unsigned domain on a signed MX host: DANE applies (RFC 7672 2.2.1)
    (False, "tlsa", "delivered"),  # the host's own zone is not signed: its TLSA records are not asked for
    (False, "none", "delivered"),  # not from a validated answer: DANE does not apply
])  # fmt: skip
async def test_dane_ee_records_hold_the_delivery_to_the_receivers_key(
    database: db.Database, receivers: Receivers, ca_file: Path, authority: Authority, tmp_path: Path,
    match: bool, secure: str, state: str,
) -> None:  # fmt: skip
    zone = _dane_zone(_tlsa(authority, tmp_path, match=match)).replace("{port}", str(receivers.port))
    tlsa = f"_{receivers.port}._tcp.mx.dane.test"
    signed = {"all": True, "none": False, "host": {"mx.dane.test", tlsa}, "tlsa": {tlsa}}[secure]
    await send(database, receivers.port, 1, ca_file, ["g@dane.test"], zone=zone, dane=True, secure=signed)
    row = (await deliveries(database))["g@dane.test"]
    assert row["state"] == state
    [event] = await events(database, "g@dane.test")
    assert ("tls_policy" in event) is (secure in ("all", "host"))
    if state == "deferred":
        assert "DANE: mx.dane.test: no certificate of the receiver's matches its TLSA records" in str(
            event["tls_error"]
        )
        assert receivers.good.received == []


@pytest.mark.parametrize(("host", "state"), [("mx.dane.test", "delivered"), ("mx.unnamed.test", "deferred")])
async def test_a_dane_ta_record_needs_the_chain_to_its_anchor_and_the_mx_name(
    database: db.Database, receivers: Receivers, ca_file: Path, authority: Authority, host: str, state: str
) -> None:
    ca_key = authority.cert.public_key()
    spki = ca_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    zone = _dane_zone(f"2 1 1 {hashlib.sha256(spki).hexdigest()}", host).replace("{port}", str(receivers.port))
    await send(database, receivers.port, 1, ca_file, ["j@dane.test"], zone=zone, dane=True, secure=True)
    assert (await deliveries(database))["j@dane.test"]["state"] == state
    [event] = await events(database, "j@dane.test")
    assert event["tls_policy"] == "dane"
    if state == "deferred":  # the certificate chains to the anchor, but names mx.dane.test, not the MX
        assert "mx.unnamed.test" in str(event["tls_error"])


async def test_dane_needs_starttls_and_takes_precedence_over_mta_sts(
    database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path, authority: Authority,
    tmp_path: Path,
) -> None:  # fmt: skip
    record = _tlsa(authority, tmp_path, match=True)
    plain = _dane_zone(record, "mx.plain.test", PLAIN).replace("dane.test. MX", "plain.test. MX")
    zone = (plain + _dane_zone(record)).replace("{port}", str(receivers.port))
    # dane.test also publishes an MTA-STS policy its MX does not match: DANE decides for the host
    zone += '_mta-sts.dane.test. TXT "v=STSv1; id=d1"\nmta-sts.dane.test. A 127.0.0.1\n'
    policy_server.policies["dane.test"] = ENFORCE.format(mx="elsewhere.example")
    await send(
        database,
        receivers.port,
        policy_server.port,
        ca_file,
        ["h@plain.test", "i@dane.test"],
        zone=zone,
        dane=True,
        secure=True,
    )
    rows = await deliveries(database)
    assert (rows["h@plain.test"]["state"], rows["i@dane.test"]["state"]) == ("deferred", "delivered")
    [event] = await events(database, "h@plain.test")
    assert "DANE: mx.plain.test offers no STARTTLS" in str(event["tls_error"])
    assert receivers.plain.received == []


# --- TLS reporting -------------------------------------------------------------------------


async def test_a_day_of_sessions_is_reported_by_mail_and_https_once(
    database: db.Database, receivers: Receivers, policy_server: PolicyServer, ca_file: Path
) -> None:
    rua = f"mailto:tls@reports.test,https://reports.test:{policy_server.port}/tlsrpt"
    zone = ZONE + f'_smtp._tls.enforce.test. TXT "v=TLSRPTv1; rua={rua}"\nreports.test. A 127.0.0.1\n'
    zone += '_smtp._tls.wrongname.test. TXT "v=TLSRPTv1; rua=mailto:tls@reports.test"\n'
    await send(
        database,
        receivers.port,
        policy_server.port,
        ca_file,
        ["a@enforce.test", "b@enforce.test", "c@wrongname.test"],
        zone=zone,
    )
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    settings = tlsrpt.Settings(organization="mtad.test", sender="postmaster@mtad.test", tenant="t1")
    reporter = tlsrpt.Reporter(database, ZoneResolver(zone), settings, "mtad.test",
                               https_tls=fetching.trust(ca_file), now=lambda: tomorrow)  # fmt: skip
    made = await reporter.report_due()
    today = datetime.now(UTC).date()
    assert sorted(made) == [(today, "enforce.test"), (today, "wrongname.test")]
    assert await reporter.report_due() == []  # once per domain and day

    [(content_type, body)] = policy_server.posted
    assert content_type == tlsrpt.MEDIA_TYPE
    report = json.loads(gzip.decompress(body))
    [policy] = report["policies"]
    assert policy["policy"]["policy-type"] == "sts"
    assert policy["policy"]["policy-domain"] == "enforce.test"
    assert "mode: enforce" in policy["policy"]["policy-string"]
    sessions_ok = policy["summary"]["total-successful-session-count"]
    assert sessions_ok >= 1  # one per session opened: the two messages may share one
    assert policy["summary"]["total-failure-session-count"] == 0
    assert report["date-range"]["start-datetime"] == f"{today.isoformat()}T00:00:00Z"

    rows = await query(database, "SELECT m.body, d.recipient FROM messages m JOIN deliveries d ON d.message = m.id"
                                 " WHERE m.sender = '' ORDER BY m.received_at")  # fmt: skip
    assert [r["recipient"] for r in rows] == ["tls@reports.test", "tls@reports.test"]
    mails = [email.message_from_bytes(r["body"], policy=email.policy.default) for r in rows]
    by_domain = {m["TLS-Report-Domain"]: m for m in mails}
    wrong = by_domain["wrongname.test"]
    assert wrong.get_content_type() == "multipart/report"
    assert wrong.get_param("report-type") == "tlsrpt"
    assert wrong["Subject"].startswith("Report Domain: wrongname.test Submitter: mtad.test Report-ID: <")
    [attachment] = [p for p in wrong.iter_attachments() if p.get_content_type() == "application/tlsrpt+gzip"]
    assert attachment.get_filename().startswith("mtad.test!wrongname.test!")
    failed = json.loads(gzip.decompress(attachment.get_content()))["policies"][0]
    assert failed["summary"] == {"total-successful-session-count": 0, "total-failure-session-count": 1}
    [detail] = failed["failure-details"]
    assert (detail["result-type"], detail["receiving-mx-hostname"], detail["receiving-ip"]) == (
        "certificate-host-mismatch", "mx.wrongname.test", WRONG,
    )  # fmt: skip
    assert "not valid for it" in detail["additional-information"]


def test_rua_takes_mailto_and_https_from_one_tlsrpt_record() -> None:
    assert tlsrpt.rua(['"v=TLSRPTv1; rua=mailto:a@x.test, https://x.test/r"']) == [
        "mailto:a@x.test", "https://x.test/r",
    ]  # fmt: skip
    assert tlsrpt.rua(['"v=TLSRPTv1; rua=http://x.test/r"']) == []  # not https
    assert tlsrpt.rua(['"v=TLSRPTv1; rua=mailto:a@x.test"', '"v=TLSRPTv1; rua=mailto:b@x.test"']) == []
    assert tlsrpt.rua(['"v=spf1 -all"']) == []


async def test_sessions_are_shared_by_domains_held_to_the_same_proof_within_one_cap(
    receivers: Receivers, ca_file: Path
) -> None:
    pool = sessions.Pool(sessions.Settings(port=receivers.port, ehlo_hostname="mtad.test", max_per_host=1),
                         verified_tls=fetching.trust(ca_file))  # fmt: skip
    transaction = sessions.Transaction("app@example.org", ("a@x.test",), b"Subject: t\r\n\r\nhi\r\n")

    def to(domain: str | None) -> sessions.Target:
        verify = policies.Verify(policies.Kind.MTA_STS, domain, ("mx.enforce.test",)) if domain else None
        return sessions.Target("mx.enforce.test", GOOD, receivers.port, verify)

    first = await pool.deliver([to("enforce.test")], transaction)
    second = await pool.deliver([to("hosted.example")], transaction)  # another domain on the same MX
    assert (first.reused, second.reused, receivers.good.connections) == (False, True, 1)
    assert second.tls_policy is policies.Kind.MTA_STS
    third = await pool.deliver([to(None)], transaction)  # no policy: not that session, and the cap is 1
    assert (third.reused, receivers.good.connections, pool.statistics().open) == (False, 2, 1)
    await pool.close()


async def test_a_policy_one_node_fetched_serves_the_others_when_its_id_changes(
    database: db.Database, policy_server: PolicyServer, ca_file: Path
) -> None:
    policy_server.policies["changing.test"] = ENFORCE.format(mx="mx.changing.test")
    resolver = ZoneResolver('_mta-sts.changing.test. TXT "v=STSv1; id=s1"\nmta-sts.changing.test. A 127.0.0.1\n')
    route = routing.Route("changing.test", "g", PROVIDERS.default,
                          (routing.Hop("mx.changing.test", 10, (GOOD,), 25),))  # fmt: skip
    settings = policies.Settings(https_port=policy_server.port, ca_file=ca_file)
    clock = [0.0]
    nodes = [policies.Policies(database, resolver, settings, clock=lambda: clock[0]) for _ in range(2)]
    for node in nodes:
        assert (await node.of(route)).kind is policies.Kind.MTA_STS
    resolver.records[("_mta-sts.changing.test", "TXT")] = [('"v=STSv1; id=s2"', 300.0)]
    clock[0] += 301  # the TXT answers have expired on both nodes
    for node in nodes:
        assert (await node.of(route)).kind is policies.Kind.MTA_STS
        await node.close()
    assert policy_server.fetched == ["changing.test", "changing.test"]  # once per id, for the whole cluster
    kept = await policies.cached(database, "changing.test")
    assert kept is not None
    assert kept.policy_id == "s2"


async def test_callers_of_one_domain_share_its_fetch_and_outlive_a_cancelled_fetcher(
    database: db.Database, policy_server: PolicyServer, ca_file: Path
) -> None:
    policy_server.policies["changing.test"] = ENFORCE.format(mx="mx.changing.test")
    policy_server.gate = asyncio.Event()
    resolver = ZoneResolver('_mta-sts.changing.test. TXT "v=STSv1; id=s1"\nmta-sts.changing.test. A 127.0.0.1\n')
    route = routing.Route("changing.test", "g", PROVIDERS.default,
                          (routing.Hop("mx.changing.test", 10, (GOOD,), 25),))  # fmt: skip
    node = policies.Policies(database, resolver, policies.Settings(https_port=policy_server.port, ca_file=ca_file))
    async with asyncio.timeout(30), asyncio.TaskGroup() as tasks:
        fetcher = tasks.create_task(node.of(route))
        assert await policy_server.arrived.get() == "changing.test"
        waiting = [tasks.create_task(node.of(route)) for _ in range(5)]
        fetcher.cancel()  # one of those waiting fetches in its place, the others wait for it
        assert await policy_server.arrived.get() == "changing.test"
        policy_server.gate.set()
    assert fetcher.cancelled()
    assert [task.result().kind for task in waiting] == [policies.Kind.MTA_STS] * 5
    assert policy_server.fetched == ["changing.test", "changing.test"]
    await node.close()
