"""The embedded PostgreSQL killed (kill -9 of the postmaster) at twenty moments of a
mixed load through `mtad run`: mail to MX, mail relayed through a sending mailbox,
mail to a domain with no route, the event consumers and a webhook. Each time the
daemon stays up, starts its server again and accepts within seconds, and at the
end every message that got a 250 has been delivered (or, with no route, bounced)."""

from __future__ import annotations

import itertools
import os
import signal
import smtplib
from collections.abc import Callable
from email.message import EmailMessage
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from mtad.base import vault
from mtad.submission import tls_context
from tests import pg
from tests.acceptance.mailboxes import add_accounts
from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.hooks import Receiver
from tests.running import Mtad, delivering
from tests.sink import ThreadedSink

pytestmark = [pytest.mark.slow, pytest.mark.serial, NEEDS_DNSMASQ]

ROUNDS = 20
RESTART_WITHIN = 120.0  # seconds for the watchdog to see the server gone and start it again
SETTLE_WITHIN = 180.0  # seconds for every accepted message to reach its end after the last kill


def message(recipient: str, number: int, *, relayed: bool = False) -> bytes:
    msg = EmailMessage()
    msg["From"] = "app@example.org"
    msg["To"] = recipient
    msg["Subject"] = f"fault {number}"
    msg["Message-ID"] = f"<fault-{number}@example.org>"
    if relayed:
        msg["X-Mtad-Account-Pool"] = "outreach"
    msg.set_content("Hello through a database that comes and goes.\n")
    return msg.as_bytes(policy=SMTP)


@pytest.mark.timeout(900)  # twenty restarts of PostgreSQL: 2-4 minutes, more on a loaded machine
def test_no_kill_of_the_database_ends_the_daemon_or_loses_a_message(
    mtad_factory: Any,
    tmp_path: Path,
    dns: Dnsmasq,
    sink: ThreadedSink,
    receiver: Receiver,
    tls_files: tuple[Path, Path],
) -> None:
    data_dir = tmp_path / "pgdata"
    key = vault.Vault.new_key()
    (tmp_path / "accounts.key").write_bytes(key)
    options = delivering(dns, sink, lease_duration='"8s"', max_age='"1h"')
    options["submission"] = "check_recipient_domains = false"  # mail to a domain with no route is taken
    options["extra"] += (f'[accounts]\nkey_file = "{tmp_path / "accounts.key"}"\n[account_pools.outreach]\n'
                         '[webhooks]\nallow_networks = ["127.0.0.0/8"]\npoll = "200ms"\n')  # fmt: skip
    trusting = {**os.environ, "SSL_CERT_FILE": str(tls_files[0])}  # the smarthost's self-signed certificate
    with ThreadedSink(("127.0.0.1",), tls=tls_context(*tls_files), logins={"box@example.com": "pw-box"}) as smarthost:
        daemon: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{data_dir}"', env=trusting, **options).start()
        dsn = f"postgresql://postgres@/mtad?host={data_dir}"
        add_accounts(dsn, key, smarthost.port, ["box"])
        added = daemon.cli("webhooks", "add", "default", f"http://127.0.0.1:{receiver.server_address[1]}/hook")
        assert added.returncode == 0, added.stderr

        accepted: dict[str, str] = {}  # recipient -> where it goes: mx, relay, none
        numbers = itertools.count()
        refusals: list[int] = []

        def submit(recipient: str, kind: str) -> None:
            """Until the daemon answers 250 (a 4xx while its server restarts, never a 5xx)."""
            for _ in range(200):  # bounded: each try waits for its reply
                try:
                    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
                        client.sendmail("app@example.org", [recipient],
                                        message(recipient, next(numbers), relayed=kind == "relay"))  # fmt: skip
                    accepted[recipient] = kind
                    return
                except smtplib.SMTPResponseException as exc:
                    refusals.append(exc.smtp_code)
                except smtplib.SMTPRecipientsRefused as exc:
                    refusals.append(next(iter(exc.recipients.values()))[0])
                assert all(400 <= code < 500 for code in refusals), refusals  # only "try again later"
            raise AssertionError(f"{recipient} was never accepted:\n" + "\n".join(daemon.output[-20:]))

        def batch(round_: int) -> None:
            submit(f"mx-{round_}-a@sink.test", "mx")
            submit(f"relay-{round_}@example.net", "relay")
            submit(f"none-{round_}@gone.test", "none")
            submit(f"mx-{round_}-b@sink.test", "mx")

        def kill_postmaster(round_: int) -> None:
            os.kill(int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0]), signal.SIGKILL)
            daemon.wait_for_log(lambda records: sum(r.get("event") == "embedded_postgres_restarted" for r in records)
                                >= round_, within=RESTART_WITHIN)  # fmt: skip

        # The moments of the kill, in turn: as soon as the mail is accepted (leases, routes, the
        # bounce of the mail with no route), when the sink has the round's mail (the outcome being
        # recorded), when the smarthost has it (a relayed send recorded), when a webhook arrives
        # (the consumers mid-batch).
        def accepted_now(round_: int) -> None:
            pass

        def at_the_sink(round_: int) -> None:
            sink.wait_until(lambda got: f"mx-{round_}-b@sink.test" in {r for m in got for r in m.recipients}, 60)

        def at_the_smarthost(round_: int) -> None:
            smarthost.wait_until(lambda got: f"relay-{round_}@example.net" in {r for m in got for r in m.recipients},
                                 within=60)  # fmt: skip

        def at_the_webhook(round_: int) -> None:
            with receiver.arrived:
                seen = len(receiver.got)
                receiver.arrived.wait_for(lambda: len(receiver.got) > seen, timeout=60)

        moments: list[Callable[[int], None]] = [accepted_now, at_the_sink, at_the_smarthost, at_the_webhook]
        for round_ in range(1, ROUNDS + 1):
            batch(round_)
            moments[round_ % len(moments)](round_)
            kill_postmaster(round_)
            assert daemon.process is not None
            assert daemon.process.poll() is None, "\n".join(daemon.output[-30:])
            submit(f"probe-{round_}@sink.test", "mx")  # it accepts again

        def landed(got: list[Any]) -> bool:
            return {r for m in got for r in m.recipients} >= {r for r, kind in accepted.items() if kind == "mx"}

        sink.wait_until(landed, within=SETTLE_WITHIN)
        relayed = {r for r, kind in accepted.items() if kind == "relay"}
        smarthost.wait_until(lambda got: {r for m in got for r in m.recipients} >= relayed, within=SETTLE_WITHIN)
        nowhere = sorted(r for r, kind in accepted.items() if kind == "none")
        daemon.wait_for_log(lambda records: {r.get("recipient") for r in records if r.get("event") == "bounced"}
                            >= set(nowhere), within=SETTLE_WITHIN)  # fmt: skip
        states = {r["recipient"]: r["state"] for r in pg.rows(dsn, "SELECT recipient, state::text FROM deliveries")}
        assert {r: states.get(r) for r in nowhere} == dict.fromkeys(nowhere, "bounced")
        assert daemon.process is not None
        assert daemon.process.poll() is None
        assert daemon.stop() == 0
