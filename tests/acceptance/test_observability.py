"""What an operator reads from a running `mtad run`: its /metrics, checked by promtool,
and its log records, checked against their schema in docs/logging.md.

One daemon serves the module: it delivers to a sink over a static route (no DNS)
and STARTTLS, with a submission process beside it, and one message gives it a
delivery, a bounce and a deferral, so that the labelled metrics have samples.
"""

from __future__ import annotations

import re
import shutil
import smtplib
import subprocess
import uuid
from collections.abc import Iterator
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from mtad.submission import tls_context
from tests.mail import email
from tests.pg import admin, run_sync, with_database
from tests.running import Mtad, http_get, write_config
from tests.sink import ThreadedSink

pytestmark = pytest.mark.slow

NEEDS_PROMTOOL = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian: prometheus) missing")
RECIPIENTS = ("ok@sink.test", "reject-1@sink.test", "tempfail-1@sink.test")
LOGGING = Path(__file__).parents[2] / "docs" / "logging.md"
TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "object": (dict,), "null": (type(None),)}


@pytest.fixture(scope="module")
def running(
    pg_admin_dsn: str, template_dsn: str, tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[Path, Path]
) -> Iterator[Mtad]:
    """`mtad run` that has recorded an outcome for each of RECIPIENTS."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    run_sync(lambda: admin(pg_admin_dsn, f"CREATE DATABASE {name} TEMPLATE mtad_template STRATEGY FILE_COPY"))
    with ThreadedSink(("127.0.0.2",), tls=tls_context(*tls_files)) as sink:
        config = write_config(
            tmp_path_factory.mktemp("observed") / "mtad.toml",
            f'dsn = "{with_database(pg_admin_dsn, name)}"',
            f'[routes."sink.test"]\nrelay = "127.0.0.2:{sink.port}"\n'
            '[tenants."default"]\ndsn = false\n',  # no report to app@example.org: there is no DNS here
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


def schema(heading: str, within: str = "") -> dict[str, tuple[type, ...]]:
    """The fields of a record as docs/logging.md lists them under `## heading` (those of
    its object field `within`, listed as `within.NAME`): name -> types."""
    section = LOGGING.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    prefix = re.escape(f"{within}.") if within else ""
    rows = re.findall(rf"^\| `{prefix}(\w+)` \| ([a-z ]+) \|", section, re.MULTILINE)
    return {field: tuple(t for kind in kinds.split(" or ") for t in TYPES[kind]) for field, kinds in rows}


def conforms(record: dict[str, Any], fields: dict[str, tuple[type, ...]]) -> None:
    assert sorted(record) == sorted(fields), record["event"]  # no field missing, none undocumented
    for field, value in record.items():
        assert type(value) in fields[field], (record.get("event"), field, value)


def test_the_records_are_as_docs_logging_says(running: Mtad) -> None:
    [accepted] = running.events("accepted")
    conforms(accepted, schema("accepted"))
    assert (accepted["tenant"], accepted["recipients"], accepted["sender"]) == ("default", 3, "app@example.org")
    outcome = schema("delivered, deferred, bounced, failed")
    delays = schema("delivered, deferred, bounced, failed", within="delays")
    assert {"tenant", "code", "attempt_number", "duration", "delays"} <= set(outcome)
    assert sorted(delays) == ["connect", "queue", "tls", "transfer"]
    by_recipient = {
        r["recipient"]: r for r in running.records if r.get("event") in ("delivered", "bounced", "deferred")
    }
    assert sorted(by_recipient) == sorted(RECIPIENTS)  # and no report to the sender (dsn = false)
    for record in by_recipient.values():
        conforms(record, outcome)
        conforms(record["delays"], delays)
        assert record["tenant"] == "default"
        assert record["group"].startswith("relay:127.0.0.2:")
        assert record["timestamp"].endswith("Z")
        assert (record["message_id"], record["size"]) == (accepted["message_id"], accepted["size"])
        assert (record["sender"], record["domain"], record["attempt_number"]) == ("app@example.org", "sink.test", 1)
        assert record["tls"] in ("TLSv1.2", "TLSv1.3")
        assert record["cipher"]
        # A new session: each part took time, and the attempt took at least their sum.
        parts = record["delays"]
        assert parts["queue"] >= 0
        assert min(parts["connect"], parts["tls"], parts["transfer"]) > 0
        assert record["duration"] >= parts["connect"] + parts["tls"] + parts["transfer"]
    delivered, bounced, deferred = (by_recipient[r] for r in RECIPIENTS)
    assert (delivered["event"], delivered["reason"], delivered["next_attempt"]) == ("delivered", None, None)
    assert (delivered["mx"], delivered["address"], delivered["source"]) == ("127.0.0.2", "127.0.0.2", None)
    assert delivered["reply"].startswith("250 ")
    assert (delivered["code"], delivered["status"]) == (250, "2.0.0")
    assert (bounced["event"], bounced["reason"], bounced["reply"][:9]) == ("bounced", "recipient_rejected", "550 5.1.1")
    assert (bounced["code"], bounced["status"]) == (550, "5.1.1")
    assert (deferred["event"], deferred["reason"]) == ("deferred", "mx_tempfail")
    assert (deferred["code"], deferred["status"]) == (451, "4.3.0")
    assert deferred["next_attempt"] is not None
    assert delivered["attempt"] == bounced["attempt"] == deferred["attempt"]  # one transaction for the three
