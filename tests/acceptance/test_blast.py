"""`mtad blast` into a `mtad run` node that delivers to `mtad sink`, which defers a
share of the recipients: everything blast had accepted is delivered in the end."""

from __future__ import annotations

from typing import Any

import pytest

from tests.running import Mtad, SinkProcess, blast

pytestmark = pytest.mark.slow


def test_what_blast_submits_is_delivered_through_the_sinks_deferrals(mtad_factory: Any, dsn: str) -> None:
    with SinkProcess("--listen", "127.0.0.1:0", "--defer", "10%", "--seed", "5", "-q") as sink:
        delivery = ('enabled = true\nretry = "1s"\npoll_interval = "250ms"\nlease_duration = "8s"\n'
                    'shutdown_timeout = "10s"')  # fmt: skip
        route = f'[routes."sink.test"]\nrelay = "127.0.0.1:{sink.port}"\n'
        daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', delivery=delivery, extra=route).start()
        code, summary, _ = blast(daemon.smtp_port, "-n", "200", "-c", "4", "-r", "2", "--size", "1KiB-8KiB", "-q")
        assert code == 0, summary
        assert summary["recipients"] == {"accepted": 400, "deferred": 0, "refused": 0}
        assert set(summary["replies"]) == {"250 2.0.0"}

        def all_delivered(records: list[dict[str, Any]]) -> bool:
            return sum(r.get("event") == "delivered" for r in records) >= 400

        daemon.wait_for_log(all_delivered, within=120)
        assert daemon.stop() == 0
        assert sink.stop() == 0
        received = sink.summary()
    assert int(received["accepted"]) == 400  # each recipient once
    assert int(received["deferred"]) > 0  # and some of them after a deferral (0.9^400 of runs have none)
