"""`mtad sink` as a process on loopback, driven by smtplib."""

from __future__ import annotations

import signal
import smtplib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.running import SinkProcess

# The message as a client sends it: CRLF lines, a line that starts with a dot
# (dot-stuffed on the wire), two signatures, an encoded Subject.
MESSAGE = (
    b"DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=example.org;\r\n"
    b" s=mtad-202612; h=From:To:Subject; bh=AAAA; b=BBBB\r\n"
    b"DKIM-Signature: v=1; a=ed25519-sha256; d=example.org; s=mtad-202612-ed; b=CCCC\r\n"
    b"From: App <app@example.org>\r\n"
    b"To: someone@sink.test\r\n"
    b"Subject: =?utf-8?q?Caf=C3=A9_ready?=\r\n"
    b"Message-ID: <1@example.org>\r\n"
    b"\r\n"
    b"Hello.\r\n"
    b".a line that starts with a dot\r\n"
    b"\r\n"
)
SECOND = b"Subject: second\r\n\r\nbody\r\n"


def test_the_sink_accepts_answers_as_scripted_stores_and_prints(tmp_path: Path) -> None:
    store = tmp_path / "mail"  # made by the sink
    scripted = ["--reply", "bounce*@*=550 5.1.1 No such user", "--reply", "slow@*=451 4.3.0 Try later"]
    with SinkProcess("--listen", "127.0.0.1:0", "--dir", str(store), *scripted) as sink:
        with smtplib.SMTP("127.0.0.1", sink.port, timeout=30) as client:
            assert client.ehlo()[0] == 250
            assert client.has_extn("smtputf8")
            assert client.has_extn("8bitmime")
            assert client.mail("app@example.org")[0] == 250
            assert client.rcpt("someone@sink.test") == (250, b"2.1.5 OK")
            assert client.rcpt("Bounce-7@Sink.Test") == (550, b"5.1.1 No such user")
            assert client.rcpt("slow@example.net") == (451, b"4.3.0 Try later")
            assert client.data(MESSAGE) == (250, b"2.0.0 OK: received by mtad sink")
            # The null reverse-path of a bounce, to an address in UTF-8.
            refused = client.sendmail("", ["d\u00fc@sink.test"], SECOND, mail_options=["SMTPUTF8"])
            assert refused == {}

        first = sink.wait_for(lambda line: "to=<someone@sink.test>" in line)
        second = sink.wait_for(lambda line: "to=<d\u00fc@sink.test>" in line)
        assert sink.stop(signal.SIGTERM) == 0

    stored = sorted(store.iterdir())  # by name: by arrival
    assert [p.suffix for p in stored] == [".eml", ".eml"]
    assert stored[0].read_bytes() == MESSAGE
    assert stored[1].read_bytes() == SECOND
    when, rest = first.split(" ", 1)
    assert when.endswith("Z")
    assert rest == (
        f'from=<app@example.org> to=<someone@sink.test> size={len(MESSAGE)} subject="Café ready" '
        'message-id=<1@example.org> dkim="d=example.org s=mtad-202612" dkim="d=example.org s=mtad-202612-ed" '
        f"file={stored[0]}"
    )
    assert second.split(" ", 1)[1] == (
        f'from=<> to=<d\u00fc@sink.test> size={len(SECOND)} subject="second" message-id=- dkim=none file={stored[1]}'
    )


def test_the_sink_prints_without_storing_and_stops_at_sigint() -> None:
    with SinkProcess("--listen", "127.0.0.1:0") as sink:
        assert sink.lines == [f"mtad sink: listening on 127.0.0.1:{sink.port}"]
        idle = smtplib.SMTP("127.0.0.1", sink.port, timeout=30)  # a session left open does not hold the exit
        with smtplib.SMTP("127.0.0.1", sink.port, timeout=30) as client:
            client.sendmail("app@example.org", ["a@sink.test", "b@sink.test"], MESSAGE)
        line = sink.wait_for(lambda line: "to=<a@sink.test>,<b@sink.test>" in line)
        assert "file=" not in line
        assert sink.stop(signal.SIGINT) == 0
        idle.close()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--reply", "bounce*@*=550 4.1.1 x"], "mtad sink: --reply 'bounce*@*=550 4.1.1 x': enhanced code '4.1.1'"),
        (["--reply", "bounce*@*"], "mtad sink: --reply 'bounce*@*': expected PATTERN=REPLY"),
        (["--listen", "127.0.0.1"], 'mtad sink: --listen: expected "host:port"'),
        (["--defer", "60%", "--bounce", "50%"], "mtad sink: --defer and --bounce: together more than 100%"),
        (["--delay", "1s-10ms"], "mtad sink: --delay: the range '1s-10ms' ends before it starts"),
    ],
)
def test_a_bad_option_is_refused_before_listening(args: list[str], said: str) -> None:
    done = subprocess.run([sys.executable, "-m", "mtad", "sink", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(said), done.stderr
    assert done.stdout == ""


def test_an_address_in_use_fails_with_exit_status_1() -> None:
    with SinkProcess("--listen", "127.0.0.1:0") as sink:
        taken = f"127.0.0.1:{sink.port}"
        done = subprocess.run([sys.executable, "-m", "mtad", "sink", "--listen", taken],
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert sink.stop() == 0
    assert done.returncode == 1
    assert done.stderr.startswith("mtad sink: "), done.stderr
