"""MTA-STS and DANE through `mtad run`: a validating DNS server on loopback (the AD
bit), policies over HTTPS signed by a test CA that mtad trusts through
[tls] ca_file, and MX sinks with a matching certificate, one for another name,
and none at all."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import json
import smtplib
import ssl
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.policy import SMTP, default
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests import pg
from tests.certs import Authority
from tests.dnsserver import PickyServer
from tests.mail import email
from tests.running import Mtad, http_get
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow

GOOD, WRONG = "127.0.0.2", "127.0.0.3"
ENFORCE = "version: STSv1\nmode: enforce\nmx: {mx}\nmax_age: 86400\n"


class PolicyServer:
    """HTTPS on 127.0.0.1: the policy file of mta-sts.<domain>, counting the fetches."""

    def __init__(self, context: ssl.SSLContext, policies: dict[str, str]) -> None:
        self.policies = policies
        self.fetched: list[str] = []
        served = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                domain = self.headers["Host"].split(":")[0].removeprefix("mta-sts.")
                served.fetched.append(domain)
                body = served.policies.get(domain, "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)


@pytest.fixture
def authority() -> Authority:
    return Authority()


@pytest.fixture
def good(authority: Authority, tmp_path: Path) -> Iterator[ThreadedSink]:
    context = authority.server_context(tmp_path / "good", "mx.enforce.test", "mx.dane.test")
    with ThreadedSink((GOOD,), tls=context) as started:
        yield started


@pytest.fixture
def wrong(authority: Authority, tmp_path: Path, good: ThreadedSink) -> Iterator[ThreadedSink]:
    context = authority.server_context(tmp_path / "wrong", "other.example")
    with ThreadedSink((WRONG,), port=good.port, tls=context) as started:
        yield started


@pytest.fixture
def policy_server(authority: Authority, tmp_path: Path) -> Iterator[PolicyServer]:
    context = authority.server_context(tmp_path / "https", "mta-sts.enforce.test", "mta-sts.wrongname.test")
    server = PolicyServer(context, {"enforce.test": ENFORCE.format(mx="mx.enforce.test"),
                                    "wrongname.test": ENFORCE.format(mx="mx.wrongname.test")})  # fmt: skip
    yield server
    server.close()


@pytest.fixture
def dns(tmp_path: Path, good: ThreadedSink) -> Iterator[PickyServer]:
    leaf = x509.load_pem_x509_certificate((tmp_path / "good" / "chain.pem").read_bytes())
    spki = leaf.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    records = {
        ("enforce.test", "MX"): ["10 mx.enforce.test."],
        ("mx.enforce.test", "A"): [GOOD],
        ("_mta-sts.enforce.test", "TXT"): ['"v=STSv1; id=e1"'],
        ("mta-sts.enforce.test", "A"): ["127.0.0.1"],
        ("wrongname.test", "MX"): ["10 mx.wrongname.test."],
        ("mx.wrongname.test", "A"): [WRONG],
        ("_mta-sts.wrongname.test", "TXT"): ['"v=STSv1; id=w1"'],
        ("mta-sts.wrongname.test", "A"): ["127.0.0.1"],
        ("dane.test", "MX"): ["10 mx.dane.test."],
        ("mx.dane.test", "A"): [GOOD],
        (f"_{good.port}._tcp.mx.dane.test", "TLSA"): [f"3 1 1 {hashlib.sha256(spki).hexdigest()}"],
        ("badkey.test", "MX"): ["10 mx.badkey.test."],
        ("mx.badkey.test", "A"): [GOOD],
        (f"_{good.port}._tcp.mx.badkey.test", "TLSA"): [f"3 1 1 {hashlib.sha256(b'another key').hexdigest()}"],
        ("_smtp._tls.wrongname.test", "TXT"): ['"v=TLSRPTv1; rua=mailto:tls@reports.test"'],
        ("reports.test", "MX"): ["10 mx.reports.test."],
        ("mx.reports.test", "A"): [GOOD],
    }
    server = PickyServer(records, validating=True)
    yield server
    server.close()


def test_policies_hold_delivery_through_the_daemon_and_survive_its_restart(
    mtad_factory: Any, dsn: str, dns: PickyServer, good: ThreadedSink, wrong: ThreadedSink,
    policy_server: PolicyServer, authority: Authority, tmp_path: Path,
) -> None:  # fmt: skip
    ca = authority.write(tmp_path / "ca.pem")
    delivery = "\n".join([
        "enabled = true", f"port = {good.port}", 'retry = "1h"', 'poll_interval = "250ms"',
        'lease_duration = "8s"', 'shutdown_timeout = "10s"',
    ])  # fmt: skip
    extra = (f'[dns]\nnameservers = ["127.0.0.1:{dns.port}"]\ntimeout = "2s"\n'
             f'[tls]\noutbound = "dane"\nca_file = "{ca}"\nmta_sts_port = {policy_server.port}\n')  # fmt: skip
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, delivery=delivery).start()
    recipients = ["a@enforce.test", "b@wrongname.test", "c@dane.test", "d@badkey.test"]
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for recipient in recipients:
            client.sendmail("app@example.org", [recipient], email(recipient).as_bytes(policy=SMTP))
    outcomes = ("delivered", "deferred")
    daemon.wait_for_log(
        lambda records: {r.get("recipient") for r in records if r.get("event") in outcomes} >= set(recipients)
    )
    assert sorted(r for m in good.received for r in m.recipients) == ["a@enforce.test", "c@dane.test"]
    assert all(m.tls for m in good.received)
    assert wrong.received == []

    states = {r["recipient"]: r for r in pg.rows(dsn, "SELECT recipient, state, reason FROM deliveries")}
    assert {k: (v["state"], v["reason"]) for k, v in states.items()} == {
        "a@enforce.test": ("delivered", None), "c@dane.test": ("delivered", None),
        "b@wrongname.test": ("deferred", "tls_failed"), "d@badkey.test": ("deferred", "tls_failed"),
    }  # fmt: skip
    deferred = pg.rows(dsn, "SELECT d.recipient, e.data FROM events e JOIN deliveries d ON d.id = e.delivery"
                         " WHERE e.kind = 'deferred'")  # fmt: skip
    errors = {r["recipient"]: json.loads(r["data"]) for r in deferred}
    wrong_name = errors["b@wrongname.test"]["tls_error"]
    assert "MTA-STS: the certificate of mx.wrongname.test is not valid for it" in wrong_name
    assert errors["d@badkey.test"]["tls_policy"] == "dane"
    assert "matches its TLSA records" in errors["d@badkey.test"]["tls_error"]

    shown = daemon.cli("tls", "show", "wrongname.test", "--json")
    assert shown.returncode == 0, shown.stderr
    policy = json.loads(shown.stdout)
    assert (policy["mode"], policy["mx"], policy["policy_id"]) == ("enforce", ["mx.wrongname.test"], "w1")
    assert "not valid for it" in policy["last_failure"]
    status, metrics = http_get(daemon.http_port, "/metrics")
    assert status == 200
    assert 'mtad_tls_policy_sessions_total{policy="sts",result="certificate-host-mismatch"} 1.0' in metrics
    assert 'mtad_tls_policy_sessions_total{policy="tlsa",result="success"} 1.0' in metrics

    counted = "SELECT 1 FROM tls_report_counts WHERE domain = 'wrongname.test'"
    for _ in range(200):  # each session is counted beside its send
        if pg.rows(dsn, counted):
            break
    reported = daemon.cli("tls", "report", "--day", "today")
    assert reported.returncode == 0, reported.stderr
    assert "wrongname.test: report " in reported.stdout
    assert "sent to mailto:tls@reports.test" in reported.stdout
    [report] = [m for m in good.wait_until(lambda got: any("tls@reports.test" in m.recipients for m in got))
                if "tls@reports.test" in m.recipients]  # fmt: skip
    parsed = message_from_bytes(report.data, policy=default)
    assert parsed["TLS-Report-Domain"] == "wrongname.test"
    [attachment] = [p for p in parsed.iter_attachments() if p.get_content_type() == "application/tlsrpt+gzip"]
    [policy] = json.loads(gzip.decompress(attachment.get_content()))["policies"]
    assert policy["summary"] == {"total-successful-session-count": 0, "total-failure-session-count": 1}
    assert policy["failure-details"][0]["result-type"] == "certificate-host-mismatch"
    assert daemon.cli("tls", "report", "--day", "today").stdout.strip() == "no TLS report due"  # once a day
    assert daemon.stop() == 0

    fetched = list(policy_server.fetched)
    assert sorted(fetched) == ["enforce.test", "wrongname.test"]
    again = mtad_factory(f'dsn = "{dsn}"', extra, delivery=delivery).start()  # a restart
    with smtplib.SMTP("127.0.0.1", again.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["e@enforce.test"], email("again").as_bytes(policy=SMTP))
    good.wait_until(lambda got: any("e@enforce.test" in m.recipients for m in got))
    assert policy_server.fetched == fetched  # the policy came from PostgreSQL, not fetched again
    assert again.stop() == 0
