"""`mtad bounces explain --config` against a real spool: the delivery a report is
about, found by the VERP address it was sent to or by the original's Message-ID,
and none when it names nothing in the spool."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

from mtad import db
from mtad.feedback.verp import Verp
from tests.integration.delivering import accept, deliveries, new_message
from tests.pg import query
from tests.reports import SAMPLES, arf
from tests.reports import dsn as bounce_report
from tests.running import MTAD, write_config

VERP = Verp("bounces.example.org", b"k" * 32)


def configured(tmp_path: Path, spool: str) -> Path:
    key = tmp_path / "bounces.key"
    key.write_bytes(VERP.key)
    bounces = f'[bounces]\ndomain = "{VERP.domain}"\nkey_file = "{key}"\n'
    return write_config(tmp_path / "mtad.toml", f'dsn = "{spool}"', bounces)


async def explain(config: Path, *args: str, stdin: bytes) -> subprocess.CompletedProcess[str]:
    command = [*MTAD, "bounces", "explain", "-", "--config", str(config), *args]
    done = await asyncio.to_thread(subprocess.run, command, input=stdin, capture_output=True, timeout=120)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


async def test_the_delivery_a_report_is_about(database: db.Database, dsn: str, tmp_path: Path) -> None:
    message = new_message("gone@example.com", "fine@example.com")
    await accept(database, message)
    ids = {r: int(str(d["id"])) for r, d in (await deliveries(database)).items()}
    await query(database, "UPDATE deliveries SET state = 'delivered' WHERE id = $1", ids["fine@example.com"])
    config = configured(tmp_path, dsn)

    by_message_id = await explain(config, stdin=bounce_report("gone@example.com", message.message_id))
    assert by_message_id.returncode == 0, by_message_id.stderr
    assert by_message_id.stdout.splitlines()[-1] == (
        f"delivery: {ids['gone@example.com']} (tenant t1, recipient gone@example.com, state queued, "
        f"queue id {message.id}; found by message-id)"
    )

    # Sent to the VERP address of another delivery: that one, whatever the report quotes.
    to = VERP.sender(ids["fine@example.com"])
    by_verp = await explain(config, "--to", to, "--json", stdin=bounce_report("gone@example.com", "<unknown@x>"))
    assert by_verp.returncode == 0, by_verp.stderr
    [found] = json.loads(by_verp.stdout)["deliveries"]
    assert found == {"delivery": ids["fine@example.com"], "message": str(message.id), "tenant": "t1",
                     "recipient": "fine@example.com", "state": "delivered", "by": "verp"}  # fmt: skip

    # A complaint whose original left from a VERP address names its delivery by it.
    complaint = arf("fine@example.com", "<unknown@x>", sender=f"<{to}>")
    [about] = json.loads((await explain(config, "--json", stdin=complaint)).stdout)["deliveries"]
    assert (about["delivery"], about["by"]) == (ids["fine@example.com"], "sender")


async def test_no_delivery_matches(database: db.Database, dsn: str, tmp_path: Path) -> None:
    await accept(database, new_message("someone@example.com"))
    config = configured(tmp_path, dsn)
    forged = "b-1-aaaaaaaaaaaaaaaa@bounces.example.org"  # its mac is wrong: it names nothing
    for raw, args in (((SAMPLES / "postfix-user-unknown.eml").read_bytes(), ("--to", forged)),
                      ((SAMPLES / "arf-abuse.eml").read_bytes(), ()),
                      ((SAMPLES / "out-of-office.eml").read_bytes(), ())):  # fmt: skip
        done = await explain(config, *args, stdin=raw)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == "delivery: no delivery matches"
    shown = json.loads((await explain(config, "--json", stdin=bounce_report("someone@example.com", "<x@y>"))).stdout)
    assert (shown["kind"], shown["deliveries"]) == ("bounce", [])
