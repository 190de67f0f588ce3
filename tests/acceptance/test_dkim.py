"""DKIM through `mtad run`: a key made by `mtad dkim keygen` becomes active by itself
once a DNS server on loopback publishes the record keygen printed, signs what the
node sends, and the sink's copy verifies against that record."""

from __future__ import annotations

import json
import re
import smtplib
from collections.abc import Iterator
from email.policy import SMTP
from pathlib import Path
from typing import Any

import dkim as dkimpy
import pytest

from mtad.base import vault
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq, txt_record
from tests.mail import email
from tests.running import Mtad
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    with ThreadedSink(("127.0.0.2",)) as started:
        yield started


def test_a_key_from_keygen_becomes_active_when_dns_publishes_it_and_signs_what_the_node_sends(
    mtad_factory: Any, dsn: str, sink: ThreadedSink, tmp_path: Path
) -> None:
    (tmp_path / "secrets.key").write_bytes(vault.Vault.new_key())
    route = f'[routes."sink.test"]\nrelay = "127.0.0.2:{sink.port}"\n'
    silent = 'nameservers = ["127.0.0.1:9"]\ntimeout = "1s"'  # nobody answers: "lookup failed", quickly
    extra = f'[accounts]\nkey_file = "{tmp_path / "secrets.key"}"\n{route}[dns]\n{silent}\n'
    delivery = 'enabled = true\npoll_interval = "250ms"'
    keygen: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, delivery=delivery)

    made = keygen.cli("dkim", "keygen", "example.org", "--selector", "s2026")
    assert made.returncode == 0, made.stderr
    [published] = re.findall(r'^(s2026\._domainkey\.example\.org\.) IN TXT "(.+)"$', made.stdout, re.MULTILINE)
    assert published[1].startswith("v=DKIM1; k=rsa; p=")
    listing = keygen.cli("dkim", "ls", "--json").stdout
    assert "PRIVATE" not in listing
    [key] = [json.loads(line) for line in listing.splitlines()]
    assert (key["selector"], key["state"], key["record"]) == ("s2026", "pending", published[1])
    assert key["dns"].startswith("lookup failed")

    server = Dnsmasq("example.org", ["--" + txt_record(published[0].rstrip("."), published[1])])
    try:
        dns = f'nameservers = ["127.0.0.1:{server.port}"]\ntimeout = "2s"'
        node: Mtad = mtad_factory(f'dsn = "{dsn}"', extra.replace(silent, dns), delivery=delivery)
        [listed] = [json.loads(line) for line in node.cli("dkim", "ls", "--json").stdout.splitlines()]
        assert listed["dns"] == "published"
        node.start()
        node.wait_for_log(lambda records: any(r["event"] == "dkim_keys" and r["active"] for r in records))
        with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
            client.sendmail("app@example.org", ["someone@sink.test"], email("signed").as_bytes(policy=SMTP))
        [received] = sink.wait_for(1)
        assert node.stop() == 0
    finally:
        server.close()

    records = {published[0].encode(): published[1].encode()}
    verifier = dkimpy.DKIM(received.data)
    assert verifier.verify(dnsfunc=lambda name, timeout=5: records.get(name, b""))
    assert verifier.domain == b"example.org"


def test_keygen_on_the_embedded_default_makes_its_own_key_and_a_dsn_needs_one_named(
    mtad_factory: Any, dsn: str, tmp_path: Path
) -> None:
    """No [accounts] key named: on the embedded database mtad makes its key beside the
    data directory (0600, said once); with a DSN the error says how to make one."""
    embedded: Mtad = mtad_factory(f'data_dir = "{tmp_path / "state" / "pgdata"}"')
    first = embedded.cli("dkim", "keygen", "example.org")
    assert first.returncode == 0, first.stderr
    key = tmp_path / "state" / "accounts.key"
    assert key.stat().st_mode & 0o777 == 0o600
    assert f"made the key that seals account secrets, DKIM keys and webhook secrets: {key}" in first.stderr
    second = embedded.cli("dkim", "keygen", "example.org", "--alg", "ed25519")
    assert second.returncode == 0, second.stderr
    assert "made the key" not in second.stderr
    keys = [json.loads(line) for line in embedded.cli("dkim", "ls", "--json").stdout.splitlines()]
    assert sorted(k["algorithm"] for k in keys) == ["ed25519", "rsa2048"]
    embedded.start()
    embedded.wait_for_log(lambda records: any(r["event"] == "ready" for r in records))
    assert not [r for r in embedded.records if r["level"] in ("error", "warning")]
    assert embedded.stop() == 0

    external: Mtad = mtad_factory(f'dsn = "{dsn}"')
    refused = external.cli("dkim", "keygen", "example.org")
    assert refused.returncode != 0
    assert "mtad accounts key > " in refused.stderr
    assert "[accounts] key_file" in refused.stderr
