"""`mtad bounces explain` as an operator runs it (the installed entry point, as a
subprocess, with no configuration): every sample of tests/samples/reports/ named
by its kind and reasons, JSON for tools, and a file that cannot be read."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.reports import EXPECTED, SAMPLES
from tests.running import MTAD

# What this test checks of a sample: a sample the reader gets wrong only in other
# fields (expected.toml's `wrong`) is explained as expected here.
CHECKED = frozenset({"kind", "recipient", "reason", "feedback_type"})


def explain(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*MTAD, "bounces", "explain", *args], input=stdin, capture_output=True, timeout=60)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(), done.stderr.decode())


def cases() -> list[Any]:
    found: list[Any] = []
    for name in sorted(EXPECTED):
        expected = EXPECTED[name]
        if "xfail" in expected and CHECKED & set(expected.get("wrong", CHECKED)):
            found.append(pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=expected["xfail"])))
        else:
            found.append(name)
    return found


@pytest.mark.parametrize("name", cases())
def test_each_sample_is_explained_by_its_kind_and_reasons(name: str) -> None:
    expected = EXPECTED[name]
    done = explain(str(SAMPLES / f"{name}.eml"))
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0] == f"kind: {expected['kind']}"
    if expected["kind"] == "bounce":
        told = [(line.split(": ", 1)[1], reason.split()[1]) for line, reason in itertools.pairwise(lines)
                if line.startswith("recipient: ")]  # fmt: skip
        assert told == [(r["recipient"], r["reason"]) for r in expected["recipients"]]
    if expected["kind"] == "complaints":
        types = [line.split(": ", 1)[1].strip() for line in lines if line.startswith("  feedback type:")]
        assert types == [r["feedback_type"] for r in expected["reports"]]
    assert "mtad does:" in done.stdout or expected["kind"] not in ("bounce", "complaints")


def test_json_for_tools_from_standard_input() -> None:
    done = explain("--json", "-", stdin=(SAMPLES / "dsn-recipients-run-together.eml").read_bytes())
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["kind"], shown["original_message_id"]) == ("bounce", "<team-update-12@example.org>")
    told = [(r["recipient"], r["reason"], r["status"], r["code"], r["hard"], r["effect"]) for r in shown["recipients"]]
    assert told == [
        ("left.company@example.net", "userunknown", "5.1.1", 550, True, "suppress"),
        ("packed.box@example.net", "mailboxfull", "5.2.2", 552, False, "count_soft"),
        ("other.user@example.com", "spamdetected", "5.7.1", 550, False, "nothing"),
    ]  # fmt: skip
    assert "deliveries" not in shown  # no configuration: the spool is not looked at


def test_what_each_feedback_type_does() -> None:
    effects = {}
    for name in ("arf-abuse", "arf-auth-failure", "arf-not-spam", "ses-complaint"):
        [report] = json.loads(explain("--json", str(SAMPLES / f"{name}.eml")).stdout)["reports"]
        effects[report["feedback_type"]] = (report["effect"], report["why"])
    assert effects["abuse"][0] == "suppress"
    assert effects["auth-failure"] == ("record", "an auth_failure event (the sender's authentication failed); "
                                                 "nothing suppressed")  # fmt: skip
    assert effects["not-spam"][0] == "nothing"


def test_what_a_sender_side_bounce_and_a_delay_do() -> None:
    blocked = explain(str(SAMPLES / "blocklist-spamhaus.eml")).stdout
    assert "  mtad does:   nothing for the recipient: a sender-side reason" in blocked
    delayed = explain(str(SAMPLES / "postfix-delayed.eml")).stdout
    assert "  mtad does:   nothing: only a delay" in delayed
    full = explain(str(SAMPLES / "mailbox-full-5.2.2.eml")).stdout
    assert "  mtad does:   count towards [suppression] soft_after" in full


def test_a_file_that_cannot_be_read_fails_with_a_clear_message(tmp_path: Path) -> None:
    done = explain(str(tmp_path / "missing.eml"))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.strip() == f"mtad: cannot read {tmp_path / 'missing.eml'}: No such file or directory"


def test_junk_is_explained_as_unknown() -> None:
    done = explain("-", stdin=b"\x00\xff not a message at all")
    assert done.returncode == 0
    assert done.stdout.startswith("kind: unknown\nwhy: ")
