"""`mtad blast` against `mtad sink`, both as processes on loopback: the sink's scripted
rates, delay, STARTTLS and AUTH, and what blast counts of them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.running import SinkProcess, blast, free_port

SEED = "33"


def scripted_run() -> tuple[int, dict[str, object], dict[str, str], list[str]]:
    """1,000 messages of one recipient over one connection to a sink that defers 5 %
    and bounces 1 % with a fixed seed; blast's exit status and summary, the sink's."""
    with SinkProcess("--listen", "127.0.0.1:0", "--defer", "5%", "--bounce", "1%", "--seed", SEED, "-q") as sink:
        code, summary, _ = blast(sink.port, "-n", "1000", "-c", "1", "--size", "1KiB", "-q")
        assert sink.stop(signal.SIGTERM) == 0
        return code, summary, sink.summary(), sink.lines


def test_the_sink_defers_and_bounces_at_the_rates_given_and_blast_counts_them() -> None:
    code, summary, received, lines = scripted_run()
    assert lines[0].endswith(f"; defer 5%, bounce 1%; seed {SEED}")
    assert code == 1  # some were refused
    people = summary["recipients"]
    assert isinstance(people, dict)
    # The expected 50 and 10 within 4 standard deviations (6.9 and 3.1 over 1,000 draws).
    assert 22 <= people["deferred"] <= 78, people
    assert 0 <= people["refused"] <= 23, people
    assert sum(people.values()) == 1000
    assert (summary["deferred"], summary["refused"]) == (people["deferred"], people["refused"])
    assert summary["accepted"] == people["accepted"] == 1000 - people["deferred"] - people["refused"]
    assert set(summary["replies"]) <= {"250 2.0.0", "451 4.3.0", "550 5.1.1"}  # type: ignore[arg-type]
    assert (summary["failed"], summary["not_sent"]) == (0, 0)
    assert summary["latency_ms"]["count"] == 1000  # type: ignore[index]
    # One recipient each: only the accepted ones reach the end of DATA.
    assert summary["data_latency_ms"]["count"] == people["accepted"]  # type: ignore[index]
    assert summary["data_latency_ms"]["p50"] <= summary["latency_ms"]["max"]  # type: ignore[index]
    # What the sink says it answered is what blast heard; each message is 1 KiB exactly.
    assert received == {
        "messages": str(people["accepted"]), "recipients": "1000", "accepted": str(people["accepted"]),
        "deferred": str(people["deferred"]), "bounced": str(people["refused"]),
        "bytes": str(1024 * people["accepted"]), "seconds": received["seconds"], "rate": received["rate"],
    }  # fmt: skip
    # The same seed, the same answers.
    again = scripted_run()
    assert again[1]["recipients"] == people
    assert again[2]["deferred"] == received["deferred"]


def test_blast_sends_over_starttls_with_auth(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    wrong = tmp_path / "wrong"
    wrong.write_text("guess\n")
    login = ["--user", "app", "--password-file"]
    with SinkProcess("--listen", "127.0.0.1:0", "--tls", "--auth", "app:s3cret", "-q") as sink:
        assert sink.lines[0].endswith("; STARTTLS (self-signed); AUTH as app")
        code, summary, _ = blast(sink.port, "-n", "40", "-c", "2", "-r", "3", "--starttls", "--insecure",
                                 *login, str(password))  # fmt: skip
        assert (code, summary["accepted"], summary["recipients"]) == (0, 40, {"accepted": 120, "deferred": 0,
                                                                              "refused": 0})  # fmt: skip
        code, summary, _ = blast(sink.port, "-n", "5", "-c", "2", "--starttls", "--insecure", *login, str(wrong))
        assert (code, summary["not_sent"], summary["failures"]) == (1, 5, {"AUTH refused: 535 5.7.8": 2})
        code, summary, _ = blast(sink.port, "-n", "5", *login, str(password))  # AUTH only after STARTTLS
        assert (code, summary["failures"]) == (1, {"the server offers neither AUTH PLAIN nor AUTH LOGIN": 1})
        code, summary, _ = blast(sink.port, "-n", "5", "--starttls")  # the self-signed certificate is checked
        assert code == 1
        (why,) = summary["failures"]  # type: ignore[misc]
        assert why.startswith("STARTTLS: [SSL: CERTIFICATE_VERIFY_FAILED]"), why
        code, summary, _ = blast(sink.port, "-n", "5", "--starttls", "--insecure")  # MAIL before AUTH
        assert (code, summary["replies"]) == (1, {"530 5.7.0": 5})
        assert sink.stop() == 0
        assert sink.summary()["messages"] == "40"


def test_the_sink_waits_before_answering_the_end_of_data() -> None:
    with SinkProcess("--listen", "127.0.0.1:0", "--delay", "100ms-150ms", "--seed", "1", "-q") as sink:
        code, summary, _ = blast(sink.port, "-n", "10", "-c", "2", "--size", "200B-20KiB")
        assert sink.stop() == 0
    assert code == 0
    # A lower bound: no latency can be shorter than the sink's wait, however fast the machine.
    assert summary["latency_ms"]["p50"] >= 100  # type: ignore[index]
    assert sink.lines[0].endswith("; delay 100ms-150ms; seed 1")


def test_blast_counts_what_it_could_not_send() -> None:
    code, summary, _ = blast(free_port(), "-n", "30", "-c", "3", "--rate", "1000/s")
    assert code == 1
    assert (summary["not_sent"], summary["accepted"]) == (30, 0)
    assert summary["failures"] == {"cannot connect: Connection refused": 3}
    assert summary["target_rate"] == 1000.0


def test_blast_refuses_bad_options_at_once() -> None:
    done = subprocess.run([sys.executable, "-m", "mtad", "blast", "127.0.0.1:0", "--rate", "0/s", "--size",
                           "2KiB-1KiB", "-c", "0"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert done.stderr == (
        "mtad: HOST:PORT: port 0 is no server's; --connections: must be at least 1, got 0; --rate: expected a rate "
        "above zero such as 500/s or 3000/min, got '0/s'; --size: the range '2KiB-1KiB' ends before it starts\n"
    )
    assert done.stdout == ""
