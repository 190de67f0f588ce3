"""`mtad run` end to end: submit, look at the spool with the command line, stop."""

from __future__ import annotations

import json
import shutil
import smtplib
import socket
import subprocess
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.mail import email
from tests.proxy import PgProxy
from tests.running import Mtad, http_get

pytestmark = pytest.mark.slow


def test_accepts_mail_shows_it_and_stops_cleanly(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify.sock"))
    notify.settimeout(30)
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")}).start()
    assert notify.recv(4096).decode().startswith("READY=1")

    with smtplib.SMTP("127.0.0.1", daemon.smtp_port) as client:
        code, _ = client.ehlo()
        assert code == 250
        refused = client.send_message(email("first"), to_addrs=["someone@example.com", "other@example.net"])
        assert refused == {}
        client.send_message(email("second", "<second@example.org>"))
        client.send_message(email("second again", "<second@example.org>"))  # a resubmission

    if shutil.which("swaks"):
        swaks = subprocess.run(
            ["swaks", "--server", f"127.0.0.1:{daemon.smtp_port}", "--from", "swaks@example.org",
             "--to", "swaks@example.com", "--header", "Subject: from swaks"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert swaks.returncode == 0, swaks.stdout + swaks.stderr
        assert "250 2.0.0 Ok: queued as" in swaks.stdout

    [node] = pg.rows(dsn, "SELECT id, pid, delivers FROM nodes")
    # It only accepts ([delivery] enabled = false): it shares no delivering node's buckets.
    assert node == {"id": "test-node", "pid": daemon.process.pid if daemon.process else None, "delivers": False}

    expected = 4 if shutil.which("swaks") else 3
    messages = pg.rows(dsn, "SELECT id, sender, message_id FROM messages")
    assert len(messages) == expected - 1
    assert len(daemon.events("accepted")) == expected - 1
    accepted = daemon.events("accepted")[0]
    assert {"queue_id", "tenant", "sender", "recipients", "size", "client", "timestamp", "level"} <= accepted.keys()
    assert len(daemon.events("duplicate")) == 1

    # The command line works while the daemon runs.
    listing = daemon.cli("queue", "ls", "--json")
    assert listing.returncode == 0, listing.stderr
    deliveries = [json.loads(line) for line in listing.stdout.splitlines()]
    assert len(deliveries) == expected
    first = deliveries[0]
    assert {"id", "queue_id", "message_id", "sender", "recipient", "state", "attempts", "next_attempt_at",
            "last_reply"} <= first.keys()  # fmt: skip
    assert (first["state"], first["attempts"], first["last_reply"]) == ("queued", 0, None)
    assert daemon.cli("queue", "ls", "--state", "delivered", "--json").stdout == ""
    text = daemon.cli("queue", "ls")
    assert "someone@example.com" in text.stdout

    shown = daemon.cli("queue", "show", first["queue_id"])
    assert shown.returncode == 0, shown.stderr
    assert "Subject: first" in shown.stdout
    assert "received" in shown.stdout
    shown_json = json.loads(daemon.cli("queue", "show", str(first["id"]), "--json").stdout)
    assert shown_json["queue_id"] == first["queue_id"]
    assert [e["kind"] for e in shown_json["events"]] == ["received"]
    missing = daemon.cli("queue", "show", "00000000-0000-0000-0000-000000000000")
    assert missing.returncode == 1
    assert "no message" in missing.stderr

    added = daemon.cli("tenants", "add", "shop", stdin="s3cret\n")
    assert added.returncode == 0, added.stderr
    assert daemon.cli("tenants", "add", "shop", stdin="again\n").returncode == 1
    assert "shop" in daemon.cli("tenants", "ls").stdout

    status, metrics = http_get(daemon.http_port, "/metrics")
    assert status == 200
    assert f"mtad_submission_accepted_messages_total {float(expected - 1)}" in metrics
    assert 'mtad_spool_deliveries{state="queued"} ' + str(float(expected)) in metrics
    assert "mtad_submission_accept_seconds_bucket" in metrics
    assert http_get(daemon.http_port, "/healthz") == (200, "ok\n")
    assert http_get(daemon.http_port, "/nothing")[0] == 404

    # Operators act on waiting deliveries (this node does not deliver, so they wait).
    second_id = deliveries[1]["id"]
    cancelled = daemon.cli("queue", "cancel", str(second_id))
    assert (cancelled.returncode, cancelled.stdout.strip()) == (0, f"delivery {second_id}: cancelled")
    again = daemon.cli("queue", "bounce", str(second_id))
    assert again.returncode == 1
    assert "already cancelled" in again.stderr
    retried = daemon.cli("queue", "retry", first["queue_id"])
    assert retried.returncode == 0, retried.stderr
    assert daemon.cli("queue", "bounce", "nonsense").returncode == 1

    assert daemon.stop() == 0
    assert notify.recv(4096).decode() == "STOPPING=1"
    assert pg.rows(dsn, "SELECT id FROM nodes") == []  # deregistered
    assert daemon.events("stopped")
    notify.close()


def test_database_down_gives_451_and_accept_resumes(mtad_factory: Any, dsn: str) -> None:
    with PgProxy(dsn) as proxy:
        daemon: Mtad = mtad_factory(f'dsn = "{proxy.dsn}"').start()
        with smtplib.SMTP("127.0.0.1", daemon.smtp_port) as client:
            client.send_message(email("before"))
            proxy.cut()
            with pytest.raises(smtplib.SMTPDataError) as info:
                client.send_message(email("during"))
            assert info.value.smtp_code == 451
            assert info.value.smtp_error.startswith(b"4.3.0")
            assert http_get(daemon.http_port, "/healthz")[0] == 503
            proxy.restore()
            client.send_message(email("after"))
        assert daemon.stop() == 0
    subjects = [r["body"] for r in pg.rows(dsn, "SELECT body FROM messages")]
    assert len(subjects) == 2
    assert not any(b"Subject: during" in bytes(b) for b in subjects)


def test_a_bad_configuration_is_refused_with_every_problem(tmp_path: Path) -> None:
    invalid = tmp_path / "invalid.toml"
    invalid.write_text("[database\n")
    checked = Mtad(invalid).cli("check-config")
    assert checked.returncode == 2
    assert "not valid TOML" in checked.stderr

    bad = tmp_path / "bad.toml"
    bad.write_text('[database]\ndata_dir = ""\npool_size = 1\n[submission]\nlisten = []\nmax_recipients = 0\n')
    checked = Mtad(bad).cli("check-config")
    assert checked.returncode == 2
    for problem in [
        "[database] data_dir: must not be empty",
        "[database] pool_size: must be between",
        "[submission] listen: must not be empty",
        "[submission] max_recipients: must be between",
    ]:
        assert problem in checked.stderr
    refused = Mtad(bad).cli("run")
    assert refused.returncode == 2
    assert "max_recipients" in refused.stderr

    good = Mtad(Path(__file__).parents[2] / "conf" / "mtad.toml").cli("check-config")
    assert good.returncode == 0
    assert ": ok" in good.stdout


def test_help_is_complete() -> None:
    import sys

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "mtad", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    top = run("--help")
    for command in ["run", "migrate", "check-config", "tenants", "queue"]:
        assert command in top
    for args in [("run",), ("migrate",), ("check-config",), ("tenants", "add"), ("tenants", "ls"),
                 ("queue", "ls"), ("queue", "show")]:  # fmt: skip
        assert "--config" in run(*args, "--help")
    assert "--state" in run("queue", "ls", "--help")
    assert "standard input" in run("tenants", "add", "--help")


def test_a_null_sender_is_accepted_and_listed_as_such(mtad_factory: Any, dsn: str) -> None:
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"').start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.sendmail("", ["someone@example.com"], email("an auto-reply").as_bytes(policy=SMTP))  # MAIL FROM:<>
    [listed] = [json.loads(line) for line in daemon.cli("queue", "ls", "--json").stdout.splitlines()]
    assert listed["sender"] == ""
    table = daemon.cli("queue", "ls").stdout.splitlines()
    assert "<>" in table[-2]
    assert table[-1] == "TOTAL 1 delivery: 1 queued"
    assert daemon.stop() == 0
