"""Opens and clicks through `mtad run`: a tracked tenant's HTML mail reaches the sink
with its links and pixel rewritten per recipient and a DKIM signature that verifies
over them; the text part and the List-Unsubscribe link are as they were; a real HTTP
client's fetches of /c/ and /o/ become events (a click redirects to the signed URL
only), machines marked; a tampered token gets 400 and records nothing."""

from __future__ import annotations

import email
import http.client
import json
import os
import re
import smtplib
from collections.abc import Iterator
from email import policy
from pathlib import Path
from typing import Any

import dkim as dkimpy
import pytest

from mtad.base import vault
from tests import pg, waiting
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq, txt_record
from tests.running import Mtad, free_port
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, NEEDS_DNSMASQ]

TEXT = "Hello, see https://shop.example.com/sale\r\n"
HTML = (
    '<html><body><p>Hello, see <a href="https://shop.example.com/sale?a=1&amp;b=2">the sale</a>\r\n'
    "or <a href='https://shop.example.com/faq'>the FAQ</a>, <a href=\"mailto:help@example.org\">write</a>.</p>\r\n"
    "</body></html>\r\n"
)
MESSAGE = (
    "From: news@example.org\r\nTo: reader@sink.test\r\nSubject: Sale\r\nMessage-ID: <sale-1@example.org>\r\n"
    'MIME-Version: 1.0\r\nContent-Type: multipart/alternative; boundary="b"\r\n\r\n'
    f"--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{TEXT}"
    f"--b\r\nContent-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n"
    f"{HTML.replace('=', '=3D')}--b--\r\n"
).encode()


@pytest.fixture
def sink() -> Iterator[ThreadedSink]:
    with ThreadedSink(("127.0.0.2",)) as started:
        yield started


def get(port: int, path: str, agent: str = "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0") -> http.client.HTTPResponse:
    client = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    client.request("GET", path, headers={"User-Agent": agent})
    response = client.getresponse()
    response.read()
    client.close()
    return response


def test_a_tracked_message_is_rewritten_before_signing_and_its_fetches_become_events(
    mtad_factory: Any, dsn: str, sink: ThreadedSink, tmp_path: Path
) -> None:
    (tmp_path / "secrets.key").write_bytes(vault.Vault.new_key())
    (tmp_path / "unsubscribe.key").write_bytes(os.urandom(32).hex().encode())
    web = free_port()
    silent = 'nameservers = ["127.0.0.1:9"]\ntimeout = "1s"'
    extra = (
        f'[accounts]\nkey_file = "{tmp_path / "secrets.key"}"\n'
        f'[routes."sink.test"]\nrelay = "127.0.0.2:{sink.port}"\n[dns]\n{silent}\n'
        f'[unsubscribe]\nlisten = ["127.0.0.1:{web}"]\nurl = "https://unsub.example.org"\n'
        f'key_file = "{tmp_path / "unsubscribe.key"}"\n'
        '[tracking]\nurl = "https://t.example.org"\nscanner_window = "0s"\nprefetch_window = "0s"\n'
        'burst_window = "1h"\n'
        '[tenants."default"]\nlist_unsubscribe = true\ntrack_opens = true\ntrack_clicks = true\n'
    )
    delivery = 'enabled = true\npoll_interval = "250ms"'
    keygen: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, delivery=delivery)
    made = keygen.cli("dkim", "keygen", "example.org", "--selector", "s2026")
    assert made.returncode == 0, made.stderr
    [published] = re.findall(r'^(s2026\._domainkey\.example\.org\.) IN TXT "(.+)"$', made.stdout, re.MULTILINE)
    server = Dnsmasq("example.org", ["--" + txt_record(published[0].rstrip("."), published[1])])
    try:
        dns = f'nameservers = ["127.0.0.1:{server.port}"]\ntimeout = "2s"'
        node: Mtad = mtad_factory(f'dsn = "{dsn}"', extra.replace(silent, dns), delivery=delivery)
        node.start()
        node.wait_for_log(lambda records: any(r["event"] == "dkim_keys" and r["active"] for r in records))
        with smtplib.SMTP("127.0.0.1", node.smtp_port, timeout=30) as client:
            client.sendmail("app@example.org", ["reader@sink.test"], MESSAGE)
        [received] = sink.wait_for(1)

        verifier = dkimpy.DKIM(received.data)
        assert verifier.verify(
            dnsfunc=lambda name, timeout=5: {published[0].encode(): published[1].encode()}.get(name, b"")
        )
        parsed = email.message_from_bytes(received.data, policy=policy.default)
        assert parsed["List-Unsubscribe"].startswith("<https://unsub.example.org/unsubscribe/")
        text = parsed.get_body(("plain",))
        html = parsed.get_body(("html",))
        assert text is not None
        assert html is not None
        assert f"--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n{TEXT}--b\r\n".encode() in received.data
        page = html.get_content()
        clicks = re.findall(r'href="https://t\.example\.org(/c/[A-Za-z0-9_-]+)"', page)
        [opened] = re.findall(r'<img src="https://t\.example\.org(/o/[A-Za-z0-9_-]+)"', page)
        assert len(clicks) == 2
        assert 'href="mailto:help@example.org"' in page
        assert page.index("<img") < page.index("</body>")

        [delivery_row] = waiting.eventually(
            lambda: pg.rows(dsn, "SELECT id, message FROM deliveries WHERE state = 'delivered'"), bool
        )
        first = get(web, clicks[0])
        assert first.status == 302
        assert first.getheader("Location") == "https://shop.example.com/sale?a=1&b=2"
        second = get(web, clicks[1])
        assert (second.status, second.getheader("Location")) == (302, "https://shop.example.com/faq")
        pixel = get(web, opened, agent="Mozilla/5.0")  # Apple's Mail Privacy Protection proxy
        assert (pixel.status, pixel.getheader("Content-Type")) == (200, "image/gif")
        assert "no-store" in (pixel.getheader("Cache-Control") or "")
        tampered = clicks[0][:-2] + ("AA" if not clicks[0].endswith("AA") else "BB")
        refused = get(web, tampered)
        assert (refused.status, refused.getheader("Location")) == (400, None)
        assert get(web, "/c/" + opened[3:]).status == 400  # an open's token is no click's

        events = pg.rows(dsn, "SELECT kind, message, delivery, tenant, data FROM events "
                              "WHERE kind IN ('opened', 'clicked') ORDER BY id")  # fmt: skip
        data = [json.loads(e["data"]) if isinstance(e["data"], str) else e["data"] for e in events]
        assert [e["kind"] for e in events] == ["clicked", "clicked", "opened"]
        assert all(e["delivery"] == delivery_row["id"] and e["message"] == delivery_row["message"] for e in events)
        assert all(
            e["tenant"] == "default" and d["recipient"] == "reader@sink.test" for e, d in zip(events, data, strict=True)
        )
        assert [d.get("url") for d in data] == ["https://shop.example.com/sale?a=1&b=2", "https://shop.example.com/faq",
                                                None]  # fmt: skip
        assert [(d["machine"], d.get("machine_why")) for d in data] == [
            (False, None), (True, "scanner"), (True, "apple_privacy_proxy")]  # fmt: skip
        tail = node.cli("events", "tail", "--json", "--kind", "clicked").stdout.splitlines()
        assert len(tail) == 2
        assert node.stop() == 0
    finally:
        server.close()
