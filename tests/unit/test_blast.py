"""`mtad blast`'s pure parts: its options, the messages it makes, the schedule, the counts."""

from __future__ import annotations

import pytest

from mtad import blast
from mtad.base import errors
from mtad.base.endpoints import HostPort
from mtad.base.replies import Reply


@pytest.mark.parametrize(("given", "per_second"), [("500", 500.0), ("500/s", 500.0), ("3000/min", 50.0),
                                                   ("36000/h", 10.0), ("0.5/s", 0.5)])  # fmt: skip
def test_a_rate_is_per_second_minute_or_hour(given: str, per_second: float) -> None:
    assert blast.parse_rate(given) == per_second


@pytest.mark.parametrize("given", ["0", "-1/s", "fast", "10/d", ""])
def test_a_bad_rate_is_refused(given: str) -> None:
    with pytest.raises(ValueError, match="expected a rate above zero"):
        blast.parse_rate(given)


def test_a_size_is_one_or_a_range() -> None:
    assert blast.size_range("10KiB") == (10240, 10240)
    assert blast.size_range("1KiB-100KiB") == (1024, 102400)
    with pytest.raises(ValueError, match="ends before it starts"):
        blast.size_range("2KiB-1KiB")


def test_the_options_name_every_bad_one_at_once() -> None:
    chosen = blast.options("127.0.0.1:2525", messages=10, connections=2, rate="100/s", size="1KiB-2KiB",
                           recipients=3, domains="A.test, b.test")  # fmt: skip
    assert (chosen.target, chosen.rate, chosen.size, chosen.domains) == (
        HostPort("127.0.0.1", 2525), 100.0, (1024, 2048), ("a.test", "b.test"))  # fmt: skip
    with pytest.raises(errors.UsageError) as refused:
        blast.options("nowhere", messages=0, domains="a..b", sender="nobody", insecure=True, timeout="soon")
    assert str(refused.value).split("; ") == [
        'HOST:PORT: expected "host:port" or "[ipv6]:port", got \'nowhere\'',
        "--messages: must be at least 1, got 0",
        "--domains: 'a..b' is not a domain name",
        "--from: expected an address such as blast@example.org, got 'nobody'",
        "--insecure: only with --starttls",
        '--timeout: expected a duration such as "250ms", "30s", "5m", "2h" or "7d", got \'soon\'',
    ]


@pytest.mark.parametrize("size", [100, 300, 1024, 1025, 1100, 10240, 65537])
def test_a_message_has_the_size_chosen_and_nothing_to_stuff(size: int) -> None:
    corpus = blast.Corpus(blast.options("127.0.0.1:25", messages=1, size=f"{size}B"))
    data = corpus.message(7, corpus.envelope(7))
    assert len(data) == max(size, len(data.partition(b"\r\n\r\n")[0]) + 6)  # a tiny size: the header and a line
    assert data.endswith(b"\r\n")
    lines = data.split(b"\r\n")[:-1]
    assert not any(line.startswith(b".") for line in lines)
    assert max(map(len, lines)) <= 998
    assert b"\nSubject: mtad blast " + corpus.run.encode() + b" 7\r\n" in data


def test_the_recipients_take_the_domains_in_turn_and_sizes_are_drawn_from_the_range() -> None:
    chosen = blast.options("127.0.0.1:25", messages=4, recipients=2, domains="a.test,b.test,c.test", size="1KiB-4KiB")
    corpus = blast.Corpus(chosen)
    assert corpus.envelope(0) == ["blast-0-0@a.test", "blast-0-1@b.test"]
    assert corpus.envelope(1) == ["blast-1-0@c.test", "blast-1-1@a.test"]
    sizes = {len(corpus.message(i, corpus.envelope(i))) for i in range(50)}
    assert len(sizes) > 40
    assert min(sizes) >= 1024
    assert max(sizes) <= 4096
    first, again = blast.Corpus(chosen), blast.Corpus(chosen)  # the same seed, the same sizes
    assert [len(first.message(i, ["x@a.test"])) for i in range(5)] == [
        len(again.message(i, ["x@a.test"])) for i in range(5)
    ]


async def test_the_schedule_makes_message_i_due_at_i_over_the_rate() -> None:
    schedule = blast.Schedule(3, rate=10.0)
    assert schedule.take() == (0, schedule.start)
    assert schedule.take() == (1, pytest.approx(schedule.start + 0.1))
    schedule.stop()
    assert schedule.take() is None
    assert not await schedule.wait_until(schedule.start + 60)  # stopped: no wait
    unpaced = blast.Schedule(2, rate=None)
    assert [unpaced.take(), unpaced.take(), unpaced.take()] == [(0, 0.0), (1, 0.0), None]


def test_percentiles_are_nearest_rank() -> None:
    seconds = [i / 1000 for i in range(1, 101)]  # 1..100 ms
    assert blast.latencies(seconds) == {"p50": 50.0, "p90": 90.0, "p99": 99.0, "max": 100.0}
    assert blast.latencies([]) == {"p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}


def test_the_summary_counts_messages_recipients_and_replies_by_class() -> None:
    tally = blast.Tally(blast.options("127.0.0.1:25", messages=5))
    for reply in (Reply(250, "2.0.0", "OK"), Reply(250, "2.0.0", "OK"), Reply(451, "4.3.0", "Later"),
                  Reply(550, "5.1.1", "No")):  # fmt: skip
        tally.recipient(reply)
        tally.settle(reply, 0.002)
    tally.fail("timeout")
    summary = tally.summary()
    assert {k: summary[k] for k in ("accepted", "deferred", "refused", "failed", "not_sent")} == {
        "accepted": 2, "deferred": 1, "refused": 1, "failed": 1, "not_sent": 0}  # fmt: skip
    assert summary["classes"] == {"2xx": 2, "4xx": 1, "5xx": 1}
    assert summary["replies"] == {"250 2.0.0": 2, "451 4.3.0": 1, "550 5.1.1": 1}
    assert summary["failures"] == {"timeout": 1}
    assert not tally.clean
    text = blast.summary_text(summary)
    assert "messages:   2 accepted, 1 deferred, 1 refused, 1 failed, 0 not sent" in text
    assert "replies:    250 2.0.0: 2; 451 4.3.0: 1; 550 5.1.1: 1" in text
    assert text.endswith("failures:   timeout: 1")
