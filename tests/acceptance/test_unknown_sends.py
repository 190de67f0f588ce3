"""Never twice from a person's mailbox, through `mtad run`: the daemon is killed
(SIGKILL) after the provider has a relayed message and before its reply is
recorded (the provider holds its answer to the end of DATA); restarted, the
daemon takes the delivery back, finds its attempt unrecorded and holds it
`unknown` rather than send it again, and `mtad queue ls` and `queue show` say so."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests import pg
from tests.acceptance.mailboxes import Rig, add_accounts, submit

pytestmark = pytest.mark.slow


def test_a_relayed_send_whose_daemon_was_killed_before_its_outcome_is_held_not_sent_twice(
    rig: Rig,
) -> None:
    smarthost = rig.smarthost(["box0"], delay=120)  # the provider has the data, and answers too late
    try:
        add_accounts(rig.dsn, rig.key, smarthost.port, ["box0"])
        first = rig.node(0).start()
        submit(first, range(1))
        smarthost.wait_for_data(1, within=60)
        first.kill()  # before the outcome could be recorded
        again = rig.node(0).start()  # the same node: it takes back what its previous life held

        def held(records: list[dict[str, Any]]) -> bool:
            return any(r.get("event") == "unknown" for r in records)

        again.wait_for_log(held)
        listed = again.cli("queue", "ls", "--state", "unknown", "--json")
        table = again.cli("queue", "ls")
        [delivery] = pg.rows(rig.dsn, "SELECT id, state::text AS state, reason::text AS reason FROM deliveries")
        shown = again.cli("queue", "show", str(delivery["id"]))
        assert again.stop() == 0
    finally:
        smarthost.stop()
    assert len(smarthost.mails()) == 1  # sent once: never again by the daemon that came back
    assert (delivery["state"], delivery["reason"]) == ("unknown", "maybe_sent")
    assert listed.returncode == 0, listed.stderr
    [row] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["recipient"], row["state"], row["next_attempt_at"]) == ("r0-0@example.net", "unknown", None)
    assert table.returncode == 0, table.stderr
    assert "unknown" in table.stdout
    assert "on retry" in table.stdout  # held until `mtad queue retry`
    assert shown.returncode == 0, shown.stderr
    [line] = [line for line in shown.stdout.splitlines() if "unrecorded_attempt" in line]  # its event
    assert line.split()[1] == "unknown"
    assert '"box0"' in line
    [event] = pg.rows(rig.dsn, "SELECT data::text AS data FROM events WHERE kind = 'unknown'")
    assert json.loads(event["data"])["looked_for"] is False  # no inbox is read: held for the operator
