"""Reload without a restart, through `mtad run` and `mtad reload`: a tenant's new
quota is taken up by the submission processes while a session stays open; what
needs a restart is named; a bad file is refused whole (by `mtad reload`, and by
the daemon on a bare SIGHUP) and the node runs on with what it had."""

from __future__ import annotations

import os
import signal
import smtplib
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from tests.dnsserver import NEEDS_DNSMASQ, Dnsmasq
from tests.mail import email
from tests.running import Mtad, delivering
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow


def send(client: smtplib.SMTP, n: int) -> int:
    """The reply code to one message on an open session."""
    try:
        client.sendmail("app@example.org", ["rcpt@example.com"], email(f"r{n}").as_bytes(policy=SMTP))
    except smtplib.SMTPDataError as refused:
        return refused.smtp_code
    except smtplib.SMTPSenderRefused as refused:
        return refused.smtp_code
    return 250


def test_a_reload_takes_up_new_quotas_keeps_sessions_and_refuses_a_bad_file(mtad_factory: Any, dsn: str) -> None:
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"').start()
    assert daemon.ready is not None
    text = daemon.config.read_text()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as kept:
        assert send(kept, 0) == 250

        daemon.config.write_text(text + '\n[tenants."default"]\nmax_per_hour = 2\n')
        reloaded = daemon.cli("reload")
        assert reloaded.returncode == 0, reloaded.stderr
        assert "reloaded its configuration" in reloaded.stdout
        processes = 1 + daemon.ready["processes"]
        daemon.wait_for_log(lambda records: sum(r["event"] in ("reloaded", "reconfigured") for r in records)
                            >= processes)  # fmt: skip
        assert send(kept, 1) == 250  # the session opened before the reload goes on
        assert send(kept, 2) == 250
        assert send(kept, 3) == 451  # the new quota: 2 a clock hour

        # What a running node cannot change is named.
        moved = text.replace('listen = ["127.0.0.1:0"]', 'listen = ["127.0.0.1:0", "127.0.0.2:0"]', 1)
        daemon.config.write_text(moved + '\n[tenants."default"]\nmax_per_hour = 2\n')
        reloaded = daemon.cli("reload")
        assert reloaded.returncode == 0, reloaded.stderr
        assert "taken up only at a restart: [submission] listen" in reloaded.stdout
        daemon.wait_for_log(lambda records: any(r["event"] == "reload_needs_restart" for r in records))

        # A bad file: refused by `mtad reload` before the node sees it, and by the node
        # itself on a bare SIGHUP; the node keeps what it had.
        daemon.config.write_text(text + '\n[tenants."default"]\nmax_per_hour = "lots"\n')
        refused = daemon.cli("reload")
        assert refused.returncode != 0
        assert '[tenants."default"] max_per_hour' in refused.stderr
        assert daemon.process is not None
        os.kill(daemon.process.pid, signal.SIGHUP)
        daemon.wait_for_log(lambda records: any(r["event"] == "reload_refused" for r in records))
        [record] = daemon.events("reload_refused")
        assert any("max_per_hour" in problem for problem in record["problems"])
        assert send(kept, 4) == 451  # the quota in force is still the one it had
    assert daemon.stop() == 0


@NEEDS_DNSMASQ
def test_a_reload_under_delivery_loses_no_lease_and_no_message(
    mtad_factory: Any, dsn: str, dns: Dnsmasq, sink: ThreadedSink, tmp_path: Path
) -> None:
    providers = tmp_path / "providers.toml"
    providers.write_text('[default]\nrate = "40/s"\nmin_rate = "40/s"\nmax_rate = "40/s"\nburst = 4\nsessions = 4\n')
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', providers=providers, **delivering(dns, sink)).start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for n in range(120):
            client.sendmail("app@example.org", [f"r{n}@sink.test"], email(f"m{n}").as_bytes(policy=SMTP))
    sink.wait_for(20)  # delivering, at 40 a second
    providers.write_text('[default]\nrate = "80/s"\nmin_rate = "80/s"\nmax_rate = "80/s"\nburst = 8\nsessions = 8\n')
    reloaded = daemon.cli("reload")
    assert reloaded.returncode == 0, reloaded.stderr
    sink.wait_until(lambda received: len({r for m in received for r in m.recipients}) == 120, within=60)
    assert len(sink.received) == 120  # none twice
    assert daemon.events("leases_lost_before_sending") == []
    assert daemon.events("requeued") == []
    assert daemon.stop() == 0
