"""`mtad suppress` and `mtad events tail` as an operator runs them, against a running
mtad: the lists, CSV in and out, refusals at RCPT, and the event log followed."""

from __future__ import annotations

import json
import smtplib
import subprocess
import threading
from email.policy import SMTP
from pathlib import Path
from typing import Any

from tests.mail import email
from tests.running import Mtad


def test_suppression_lists_from_the_command_line_and_at_rcpt(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    refusing = '[tenants."default"]\nsuppressed = "refuse"\n'
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', refusing).start()
    assert daemon.cli("tenants", "add", "shop", stdin="pw\n").returncode == 0

    added = daemon.cli("suppress", "add", "Gone@Example.com")
    assert (added.returncode, added.stdout.strip()) == (0, "suppressed gone@example.com for the global list (manual)")
    assert daemon.cli("suppress", "add", "x@example.com", "--tenant", "shop", "--reason", "complaint").returncode == 0
    kept = daemon.cli("suppress", "add", "x@example.com", "--tenant", "shop", "--reason", "hard_bounce")
    assert "already suppressed for tenant shop (complaint); kept" in kept.stdout
    bad = daemon.cli("suppress", "add", "not-an-address")
    assert (bad.returncode, bad.stderr.strip()) == (1, "mtad: 'not-an-address' is not an email address")
    assert daemon.cli("suppress", "add", "y@example.com", "--reason", "spam").returncode == 2  # argparse

    csv = tmp_path / "list.csv"
    csv.write_text("address,tenant,reason,created\nz@example.com,shop,unsubscribe,2026-11-30T08:00:00Z\n"
                   "gone@example.com,,manual,\n")  # fmt: skip
    imported = daemon.cli("suppress", "import", str(csv))
    assert (imported.returncode, imported.stdout.strip()) == (0, f"imported 1 new suppression(s) from {csv}")
    broken = tmp_path / "broken.csv"
    broken.write_text("address,tenant,reason,created\nok@example.com,,,\nok@example.com,,later,\n")
    refused = daemon.cli("suppress", "import", str(broken))
    assert refused.returncode == 1
    assert "line 3: reason: expected hard_bounce, soft_bounce, complaint, unsubscribe or manual" in refused.stderr

    listed = [json.loads(line) for line in daemon.cli("suppress", "ls", "--json").stdout.splitlines()]
    assert [(e["address"], e["tenant"], e["reason"]) for e in listed] == [
        ("gone@example.com", "", "manual"),
        ("x@example.com", "shop", "complaint"),
        ("z@example.com", "shop", "unsubscribe"),
    ]
    shop = daemon.cli("suppress", "ls", "--tenant", "shop", "--reason", "unsubscribe").stdout
    assert "z@example.com" in shop
    assert "x@example.com" not in shop
    exported = daemon.cli("suppress", "export").stdout.splitlines()
    assert exported[0] == "address,tenant,reason,created"
    assert exported[1].startswith('gone@example.com,"",manual,')
    assert len(exported) == 4

    # The default tenant refuses suppressed recipients at RCPT.
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.ehlo()
        client.mail("app@example.org")
        code, text = client.rcpt("gone@example.com")
        assert (code, text.decode()[:9]) == (550, "5.7.1 <go")
        assert client.rcpt("fine@example.com")[0] == 250

    assert daemon.cli("suppress", "rm", "gone@example.com").returncode == 0
    missing = daemon.cli("suppress", "rm", "gone@example.com")
    assert (missing.returncode, missing.stderr.strip()) == (1, "mtad: gone@example.com is not on the global list")
    assert daemon.stop() == 0


def test_events_tail_prints_and_follows_the_event_log(mtad_factory: Any, dsn: str) -> None:
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"').start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        client.sendmail("app@example.org", ["a@example.com"], email("first").as_bytes(policy=SMTP))
    tail = daemon.cli("events", "tail", "--json", "--kind", "received")
    [first] = [json.loads(line) for line in tail.stdout.splitlines()]
    assert (first["kind"], first["tenant"], first["data"]["recipients"]) == ("received", "default", 1)
    text = daemon.cli("events", "tail", "--since", "1h").stdout
    assert " received tenant=default message=" in text

    follow = subprocess.Popen(
        [daemon.python, "-m", "mtad", "events", "tail", "--json", "--follow", "--kind", "received", "-n", "0",
         "--config", str(daemon.config)],
        stdout=subprocess.PIPE, text=True, env=daemon.env, cwd=daemon.cwd,
    )  # fmt: skip
    lines: list[dict[str, Any]] = []
    got = threading.Event()

    def read() -> None:
        assert follow.stdout is not None
        for line in follow.stdout:
            lines.append(json.loads(line))
            got.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        for attempt in range(20):  # until the follower has started (its first line is the next message's)
            with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
                client.sendmail("app@example.org", ["b@example.com"], email(f"next{attempt}").as_bytes(policy=SMTP))
            if got.wait(3):
                break
        assert lines
        assert lines[0]["kind"] == "received"
        assert lines[0]["id"] != first["id"]  # only what was written after it started
    finally:
        follow.kill()
        follow.wait(30)
        reader.join(10)
        if follow.stdout is not None:
            follow.stdout.close()
    assert daemon.stop() == 0


def test_webhook_endpoints_from_the_command_line(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    keyless: Mtad = mtad_factory(f'dsn = "{dsn}"')
    refused = keyless.cli("webhooks", "add", "shop", "https://hooks.example.com/mtad")
    assert refused.returncode == 1
    assert "[accounts] key_file or key_env: account secrets, DKIM keys and webhook secrets are sealed" in refused.stderr
    (tmp_path / "accounts.key").write_text(keyless.cli("accounts", "key").stdout)
    cli: Mtad = mtad_factory(f'dsn = "{dsn}"', f'[accounts]\nkey_file = "{tmp_path / "accounts.key"}"\n')
    assert cli.cli("tenants", "add", "shop", stdin="pw\n").returncode == 0
    added = cli.cli("webhooks", "add", "shop", "https://hooks.example.com/mtad", "--events", "delivered,bounced",
                    "--batch", "50")  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "(up to 50 events a request, as a JSON array)" in added.stdout
    secret = added.stdout.split("secret (shown once; verify the webhook-signature header with it): ")[1].strip()
    assert secret.startswith("whsec_")
    [listed] = [json.loads(line) for line in cli.cli("webhooks", "ls", "--json").stdout.splitlines()]
    assert (listed["tenant"], listed["url"], listed["events"], listed["batch"]) == (
        "shop", "https://hooks.example.com/mtad", "bounced,delivered", 50)  # fmt: skip
    assert secret not in cli.cli("webhooks", "ls").stdout
    rotated = cli.cli("webhooks", "rotate-secret", str(listed["id"]), "--overlap", "2h")
    assert rotated.returncode == 0, rotated.stderr
    assert "new secret (shown once): whsec_" in rotated.stdout
    bad = cli.cli("webhooks", "add", "shop", "ftp://x.example.com/", "--events", "delivered,nope")
    assert bad.returncode == 1
    assert "http:// or https://" in bad.stderr
    assert "unknown event kinds: nope" in bad.stderr
    assert cli.cli("webhooks", "rm", str(listed["id"])).stdout.strip() == f"removed webhook endpoint {listed['id']}"
    gone = cli.cli("webhooks", "rm", str(listed["id"]))
    assert (gone.returncode, gone.stderr.strip()) == (1, f"mtad: no webhook endpoint {listed['id']}")
