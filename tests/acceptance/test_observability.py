"""What an operator reads from a running `mtad run`: its /metrics, checked by promtool.

One daemon serves the module: it delivers to a sink over a static route (no DNS),
with a submission process beside it, and one message gives it a delivery, a
bounce and a deferral, so that the labelled metrics have samples.
"""

from __future__ import annotations

import re
import shutil
import smtplib
import subprocess
import uuid
from collections.abc import Iterator
from email.policy import SMTP

import pytest

from tests.acceptance.conftest import Mtad, write_config
from tests.acceptance.test_run import email, http_get
from tests.conftest import admin, run_sync, with_database
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow

NEEDS_PROMTOOL = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus) missing")
RECIPIENTS = ("ok@sink.test", "reject-1@sink.test", "tempfail-1@sink.test")


@pytest.fixture(scope="module")
def running(pg_admin_dsn: str, template_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mtad]:
    """`mtad run` that has recorded an outcome for each of RECIPIENTS."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    run_sync(lambda: admin(pg_admin_dsn, f"CREATE DATABASE {name} TEMPLATE mtad_template STRATEGY FILE_COPY"))
    with ThreadedSink(("127.0.0.2",)) as sink:
        config = write_config(
            tmp_path_factory.mktemp("observed") / "mtad.toml",
            f'dsn = "{with_database(pg_admin_dsn, name)}"',
            f'[routes."sink.test"]\nrelay = "127.0.0.2:{sink.port}"\n',
            delivery='enabled = true\nretry = "1h"\npoll_interval = "250ms"',
            submission="check_recipient_domains = false\nprocesses = 1",
        )
        daemon = Mtad(config).start()
        try:
            with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
                client.sendmail("app@example.org", list(RECIPIENTS), email("observed").as_bytes(policy=SMTP))
            daemon.wait_for_log(lambda records: {r.get("recipient") for r in records} >= set(RECIPIENTS))
            yield daemon
        finally:
            if daemon.process is not None and daemon.process.poll() is None:
                assert daemon.stop() == 0
    run_sync(lambda: admin(pg_admin_dsn, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@NEEDS_PROMTOOL
def test_promtool_finds_nothing_wrong_with_live_metrics(running: Mtad) -> None:
    status, text = http_get(running.http_port, "/metrics")
    assert status == 200
    for labelled in (r'mtad_delivery_tenant_outcomes_total\{outcome="bounced",tenant="default"\} 1\.0',
                     r'mtad_delivery_source_outcomes_total\{outcome="deferred",source="-"\} 1\.0',
                     r'mtad_delivery_queue_wait_seconds_count\{group="relay:127\.0\.0\.2:\d+"\} 3\.0',
                     r'mtad_delivery_latency_seconds_count\{group="relay:127\.0\.0\.2:\d+",outcome="delivered"\} 1\.0',
                     r'mtad_db_pool_connections\{pool="delivery",state="in_use"\}',
                     r'mtad_submission_accepted_messages_total 1\.0'):  # fmt: skip
        assert re.search(labelled, text), labelled
    checked = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert (checked.returncode, checked.stdout + checked.stderr) == (0, "")
