"""DKIM through `mtad run`: a key made by `mtad dkim keygen`, made active, signs what
the node sends, and the sink's copy verifies against the record keygen printed."""

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

from mtad import vault
from tests.acceptance.conftest import Mtad
from tests.acceptance.test_run import email
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    with ThreadedSink(("127.0.0.2",)) as started:
        yield started


def test_a_key_from_keygen_signs_what_the_node_sends(
    mtad_factory: Any, dsn: str, sink: ThreadedSink, tmp_path: Path
) -> None:
    (tmp_path / "secrets.key").write_bytes(vault.Vault.new_key())
    extra = (
        f'[accounts]\nkey_file = "{tmp_path / "secrets.key"}"\n[routes."sink.test"]\nrelay = "127.0.0.2:{sink.port}"\n'
    )
    delivery = 'enabled = true\npoll_interval = "250ms"'
    node: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, delivery=delivery)

    made = node.cli("dkim", "keygen", "example.org", "--selector", "s2026")
    assert made.returncode == 0, made.stderr
    [published] = re.findall(r'^(s2026\._domainkey\.example\.org\.) IN TXT "(.+)"$', made.stdout, re.MULTILINE)
    assert published[1].startswith("v=DKIM1; k=rsa; p=")
    listed = [json.loads(line) for line in node.cli("dkim", "ls", "--json").stdout.splitlines()]
    assert [(k["selector"], k["state"], k["record"]) for k in listed] == [("s2026", "pending", published[1])]
    assert "PRIVATE" not in node.cli("dkim", "ls", "--json").stdout
    assert node.cli("dkim", "activate", "example.org", "s2026").returncode == 0

    node.start()
    with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["someone@sink.test"], email("signed").as_bytes(policy=SMTP))
    [received] = sink.wait_for(1)
    assert node.stop() == 0

    records = {published[0].encode(): published[1].encode()}
    verifier = dkimpy.DKIM(received.data)
    assert verifier.verify(dnsfunc=lambda name, timeout=5: records.get(name, b""))
    assert verifier.domain == b"example.org"
