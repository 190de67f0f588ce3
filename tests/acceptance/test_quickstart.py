"""The README's quick start as a user runs it: the shipped conf/mtad.toml (its ports
made free ones), `mtad run` with its embedded PostgreSQL, `mtad sink`, one swaks
command, `mtad queue ls`; then a DKIM key made and activated. No DNS is asked."""

from __future__ import annotations

import re
import shutil
import smtplib
import subprocess
from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from tests.running import CONF, Mtad, SinkProcess

pytestmark = pytest.mark.slow

QUICK = "someone@sink.test"


@pytest.fixture
def sink() -> Iterator[SinkProcess]:
    with SinkProcess("--listen", "127.0.0.1:0") as started:
        yield started
        assert started.stop() == 0


@pytest.fixture
def daemon(tmp_path: Path, sink: SinkProcess) -> Iterator[Mtad]:
    """`mtad run` on a copy of conf/mtad.toml whose ports alone are changed: free ones
    for submission and HTTP, the sink's for the sink.test route."""
    text = (CONF / "mtad.toml").read_text()
    for shipped, free in (("127.0.0.1:2525", "127.0.0.1:0"), ("127.0.0.1:9108", "127.0.0.1:0"),
                          ("127.0.0.1:2526", f"127.0.0.1:{sink.port}")):  # fmt: skip
        assert text.count(f'"{shipped}"') == 1, shipped
        text = text.replace(f'"{shipped}"', f'"{free}"')
    config = tmp_path / "conf" / "mtad.toml"
    config.parent.mkdir()
    config.write_text(text)  # its embedded PostgreSQL in tmp_path/var/pgdata, as ./var/pgdata in the README
    started = Mtad(config).start()
    yield started
    if started.process is not None and started.process.poll() is None:
        assert started.stop() == 0


def submit(daemon: Mtad) -> None:
    """The README's swaks command, or the same with smtplib where swaks is missing."""
    if shutil.which("swaks"):
        done = subprocess.run(["swaks", "--server", f"127.0.0.1:{daemon.smtp_port}", "--from", "app@example.org",
                               "--to", QUICK], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "app@example.org", QUICK, "quick start"
    message.set_content("This is a test mailing\n")
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.send_message(message)


def delivered(daemon: Mtad, count: int) -> None:
    """Until mtad has recorded `count` deliveries to the quick start's address."""

    def enough(records: list[dict[str, Any]]) -> bool:
        return sum(r.get("event") == "delivered" and r.get("recipient") == QUICK for r in records) >= count

    daemon.wait_for_log(enough)


def test_the_quick_start_delivers_to_the_sink_offline(daemon: Mtad, sink: SinkProcess) -> None:
    submit(daemon)
    line = sink.wait_for(lambda line: f"to=<{QUICK}>" in line)
    assert " from=<app@example.org> " in line
    assert line.endswith(" dkim=none")

    delivered(daemon, 1)
    listed = daemon.cli("queue", "ls", "--all")
    assert listed.returncode == 0, listed.stderr
    [row] = [r for r in listed.stdout.splitlines() if QUICK in r]
    assert row.split()[2] == "delivered"
    assert "250 2.0.0 OK: received by mtad sink" in row


def test_the_quick_start_signs_once_a_key_is_made_and_active(daemon: Mtad, sink: SinkProcess) -> None:
    made = daemon.cli("dkim", "keygen", "example.org")
    assert made.returncode == 0, made.stderr
    found = re.search(r"DKIM key (\S+) for example\.org", made.stdout)
    assert found is not None, made.stdout
    selector = found.group(1)
    activated = daemon.cli("dkim", "activate", "example.org", selector)
    assert activated.returncode == 0, activated.stderr

    assert daemon.stop() == 0  # restarted, as the README allows, so as not to wait for the minute's reload
    daemon.start()
    submit(daemon)
    line = sink.wait_for(lambda line: f"to=<{QUICK}>" in line)
    assert line.endswith(f' dkim="d=example.org s={selector}"')
    delivered(daemon, 1)
