"""kill -9 during a burst of submissions, then a restart; a killed PostgreSQL; a full
disk freed again: nothing that got a 250 is lost or doubled, and the embedded
PostgreSQL left running is reattached, not duplicated."""

from __future__ import annotations

import errno
import os
import signal
import smtplib
import subprocess
import threading
from collections.abc import Iterator
from email.policy import SMTP
from pathlib import Path
from typing import Any

import pytest

from tests import pg, waiting
from tests.mail import email, submit
from tests.running import Mtad, http_get

pytestmark = pytest.mark.slow

SENDERS = 8
PER_SENDER = 1_000  # bounded: each sender stops by itself
KILL_AFTER = 300


class Burst:
    """Senders that submit until the server goes away, recording every 250."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.accepted: dict[str, str] = {}  # Message-ID -> queue id, for every 250
        self.attempted: set[str] = set()
        self.errors: list[Exception] = []
        self.enough = threading.Condition()
        self.threads = [threading.Thread(target=self.send, args=(n,)) for n in range(SENDERS)]

    def send(self, sender: int) -> None:
        try:
            with smtplib.SMTP("127.0.0.1", self.port, timeout=30) as client:
                for i in range(PER_SENDER):
                    message_id = f"<burst-{sender}-{i}@example.org>"
                    with self.enough:
                        self.attempted.add(message_id)
                    queue_id = submit(client, message_id)
                    with self.enough:
                        self.accepted[message_id] = queue_id
                        self.enough.notify_all()
        except (smtplib.SMTPException, OSError) as exc:
            self.errors.append(exc)  # the server was killed (or something to report)
        finally:
            with self.enough:
                self.enough.notify_all()


@pytest.mark.parametrize("processes", [0, 2], ids=["in the daemon", "in submission processes"])
def test_kill_9_during_a_burst_loses_and_doubles_nothing(mtad_factory: Any, tmp_path: Path, processes: int) -> None:
    data_dir = tmp_path / "pgdata"
    submission = f"check_recipient_domains = false\nprocesses = {processes}"
    daemon: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{data_dir}"', submission=submission).start()
    postmaster = (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]

    burst = Burst(daemon.smtp_port)
    for thread in burst.threads:
        thread.start()
    with burst.enough:
        burst.enough.wait_for(
            lambda: len(burst.accepted) >= KILL_AFTER or not any(t.is_alive() for t in burst.threads), timeout=120
        )
    assert len(burst.accepted) >= KILL_AFTER, burst.errors
    daemon.kill()
    for thread in burst.threads:
        thread.join(60)
    assert len(burst.accepted) >= KILL_AFTER

    # The embedded PostgreSQL survived the kill; the restart attaches to it.
    assert (data_dir / "postmaster.pid").read_text().split("\n", 1)[0] == postmaster
    daemon.start()
    dsn = f"postgresql://postgres@/mtad?host={data_dir}"
    stored = pg.rows(dsn, "SELECT id::text AS id, message_id FROM messages")
    by_message_id: dict[str, list[str]] = {}
    for row in stored:
        by_message_id.setdefault(row["message_id"], []).append(row["id"])
    for message_id, queue_id in burst.accepted.items():
        assert by_message_id.get(message_id) == [queue_id], message_id  # there, exactly once
    assert all(len(ids) == 1 for ids in by_message_id.values())

    # Clients resubmit what they never got an answer for: duplicates are recognised.
    unanswered = sorted(burst.attempted - burst.accepted.keys())
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        for message_id in unanswered:
            submit(client, message_id)
    after = pg.rows(dsn, "SELECT message_id, count(*) AS n FROM messages GROUP BY message_id")
    assert all(r["n"] == 1 for r in after)
    assert {r["message_id"] for r in after} == burst.attempted
    deliveries = pg.rows(dsn, "SELECT count(*) AS n FROM deliveries")
    assert deliveries[0]["n"] == len(burst.attempted)

    assert daemon.stop() == 0
    assert not (data_dir / "postmaster.pid").exists()  # stopped with the daemon


def test_the_command_line_shares_the_embedded_database(mtad_factory: Any, tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    daemon: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{data_dir}"').start()
    with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
        submit(client, "<shared@example.org>")
    while_running = daemon.cli("queue", "ls", "--json")
    assert while_running.returncode == 0, while_running.stderr
    assert len(while_running.stdout.splitlines()) == 1
    assert (data_dir / "postmaster.pid").exists()  # the tool attached; it did not stop the server
    assert daemon.stop() == 0
    assert not (data_dir / "postmaster.pid").exists()

    # With no daemon, a tool starts the server and stops it again when done.
    alone = daemon.cli("queue", "ls", "--json")
    assert alone.returncode == 0, alone.stderr
    assert len(alone.stdout.splitlines()) == 1
    assert not (data_dir / "postmaster.pid").exists()


def test_a_killed_embedded_postgresql_is_started_again_and_mtad_goes_on(mtad_factory: Any, tmp_path: Path) -> None:
    """kill -9 of the postmaster, idle and then under load: mtad starts its server again
    (PostgreSQL's own crash recovery runs), the pools reconnect, and it accepts again
    without a restart; what got a 250 is there."""
    data_dir = tmp_path / "pgdata"
    daemon: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{data_dir}"').start()
    accepted: list[str] = []
    codes: list[int] = []  # of the refusals meanwhile: all 4xx

    def kill_postmaster(times: int) -> None:
        os.kill(int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0]), signal.SIGKILL)
        daemon.wait_for_log(lambda records: len([r for r in records if r.get("event") == "embedded_postgres_restarted"])
                            >= times, within=120)  # fmt: skip

    def submit_until_accepted(message_id: str) -> None:
        with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
            for _ in range(50):  # a pooled connection to the dead server fails once: 451, then reconnected
                try:
                    submit(client, message_id)
                except smtplib.SMTPDataError as exc:
                    codes.append(exc.smtp_code)
                    continue
                accepted.append(message_id)
                return
        raise AssertionError(f"{message_id} was never accepted:\n" + "\n".join(daemon.output[-10:]))

    submit_until_accepted("<before@example.org>")
    kill_postmaster(1)  # idle
    submit_until_accepted("<after-idle@example.org>")
    assert http_get(daemon.http_port, "/healthz")[0] == 200

    burst = Burst(daemon.smtp_port)  # under load
    for thread in burst.threads:
        thread.start()
    with burst.enough:
        burst.enough.wait_for(lambda: len(burst.accepted) >= 100 or not any(t.is_alive() for t in burst.threads),
                              timeout=120)  # fmt: skip
    kill_postmaster(2)
    for thread in burst.threads:
        thread.join(120)
    assert daemon.process is not None
    assert daemon.process.poll() is None  # still up
    submit_until_accepted("<after-load@example.org>")
    assert http_get(daemon.http_port, "/healthz")[0] == 200
    assert daemon.stop() == 0

    dsn = f"postgresql://postgres@/mtad?host={data_dir}"
    daemon.start()  # a tool of its own to read the spool: the daemon runs the server again
    stored = {r["message_id"] for r in pg.rows(dsn, "SELECT message_id FROM messages")}
    assert set(accepted) | set(burst.accepted) <= stored  # every 250 is there
    assert all(400 <= code < 500 for code in codes), codes
    assert daemon.stop() == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 160 MiB tmpfs to fill (root only: mounting needs it)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160m,mode=0755", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "--lazy", str(mount)], check=False)


def fill(path: Path) -> None:
    """Write zeros to `path` until the file system is full."""
    block = bytes(1 << 20)
    with path.open("wb") as out:
        while True:
            try:
                out.write(block)
                out.flush()
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return


def test_a_full_disk_freed_again_lets_mtad_go_on_by_itself(mtad_factory: Any, small_disk: Path) -> None:
    """The embedded PostgreSQL's disk fills up: submissions get 4xx (never a 250 that is
    then lost), whether PostgreSQL only fails its writes or PANICs; once the disk has
    room again mtad accepts again without a restart, and every 250 is in the spool."""
    data_dir = small_disk / "pgdata"
    daemon: Mtad = mtad_factory(f'dsn = ""\ndata_dir = "{data_dir}"').start()
    accepted: list[str] = []
    refused: list[int] = []
    body = os.urandom(96 * 1024).hex()  # 192 KiB that do not compress: the disk fills fast
    sequence = iter(range(1_000_000))

    def submit_one(client: smtplib.SMTP) -> bool:
        message_id = f"<disk-{next(sequence)}@example.org>"
        message = email("disk", message_id)
        message.set_content(body)
        try:
            client.sendmail("app@example.org", ["someone@example.com"], message.as_bytes(policy=SMTP))
        except smtplib.SMTPResponseException as exc:
            refused.append(exc.smtp_code)
            return False
        accepted.append(message_id)
        return True

    def until(outcome: bool, within: float) -> None:
        """Submit until a submission is accepted (True) or refused (False)."""
        with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=60) as client:
            waiting.eventually(lambda: submit_one(client), lambda got: got == outcome, within=within, every=0,
                               show=lambda: "\n".join(daemon.output[-10:]))  # each try waits for its reply  # fmt: skip

    until(True, 60)
    fill(small_disk / "filler")
    until(False, 120)  # what was already written may still fit: a few more can get 250
    (small_disk / "filler").unlink()
    until(True, 180)  # PostgreSQL recovers by itself, or is started again after a PANIC
    assert daemon.process is not None
    assert daemon.process.poll() is None  # never restarted
    assert all(400 <= code < 500 for code in refused), refused
    assert daemon.stop() == 0

    daemon.start()
    dsn = f"postgresql://postgres@/mtad?host={data_dir}"
    stored = {r["message_id"] for r in pg.rows(dsn, "SELECT message_id FROM messages")}
    assert set(accepted) <= stored
    assert daemon.stop() == 0
