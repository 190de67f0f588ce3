"""`mtad-sendmail` as applications call it: cron's `sendmail -t -i < file`, PHP's
mail() through sendmail_path, bsd-mailx's `mail -s`; and sendmail's exit statuses."""

from __future__ import annotations

import getpass
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.running import Mtad, free_port

pytestmark = pytest.mark.slow

SENDMAIL = str(Path(sys.executable).with_name("mtad-sendmail"))
EX_USAGE, EX_DATAERR, EX_NOUSER, EX_TEMPFAIL, EX_NOPERM, EX_CONFIG = 64, 65, 67, 75, 77, 78


def sendmail(daemon: Mtad, *args: str, stdin: bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    """mtad-sendmail ARGS, its configuration found as a caller finds it: by -C, or conf/mtad.toml in `cwd`."""
    given = list(args) if cwd is not None else ["-C", str(daemon.config), *args]
    return subprocess.run([SENDMAIL, *given], input=stdin, capture_output=True, timeout=60, cwd=cwd, env=daemon.env)


def spooled(dsn: str) -> list[dict[str, Any]]:
    """Each message with its recipients, in the order they came."""
    return pg.rows(dsn, """
        SELECT m.tenant, m.sender, convert_from(m.body, 'UTF8') AS body,
               array_agg(d.recipient ORDER BY d.id) AS recipients
          FROM messages m JOIN deliveries d ON d.message = m.id
         GROUP BY m.id ORDER BY m.received_at""")  # fmt: skip


def node(mtad_factory: Any, dsn: str, extra: str = "", **options: Any) -> Mtad:
    """A node (not started) whose configuration names its submission port, as sendmail reads it."""
    daemon: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, **options)
    daemon.config.write_text(daemon.config.read_text().replace("127.0.0.1:0", f"127.0.0.1:{free_port()}", 1))
    return daemon


def in_conf_dir(daemon: Mtad, tmp_path: Path) -> Path:
    """A working directory whose conf/mtad.toml is the node's: found there as `make run` finds it."""
    home = tmp_path / "caller"
    (home / "conf").mkdir(parents=True, exist_ok=True)
    shutil.copy(daemon.config, home / "conf" / "mtad.toml")
    return home


def test_cron_style_t_i_takes_to_cc_and_bcc_and_keeps_bcc_out(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    daemon = node(mtad_factory, dsn).start()
    message = (b"To: Ops <ops@example.com>\nCc: dev@example.com, ops@example.com\nBcc: audit@example.net\n"
               b"Subject: cron <root@host> backup\n\nbackup done\n.\nstill the body with -i\n")  # fmt: skip
    done = sendmail(daemon, "-t", "-i", "-FCron Daemon", "-f", "root@host.example", stdin=message,
                    cwd=in_conf_dir(daemon, tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stderr
    [found] = spooled(dsn)
    assert found["sender"] == "root@host.example"
    assert found["recipients"] == ["ops@example.com", "dev@example.com", "audit@example.net"]
    assert "Bcc" not in found["body"]
    assert "From: Cron Daemon <root@host.example>\r\n" in found["body"]
    assert "still the body with -i" in found["body"]
    assert "Message-ID: <" in found["body"]  # the port adds what a bare message lacks


def test_without_i_a_lone_dot_ends_the_message_and_recipients_are_arguments(mtad_factory: Any, dsn: str) -> None:
    daemon = node(mtad_factory, dsn).start()
    done = sendmail(daemon, "-oi", "-oem", "one@example.com", "--", "two@example.com",
                    stdin=b"From: app@example.org\nSubject: args\n\nfirst\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    done = sendmail(daemon, "three@example.com", stdin=b"Subject: dot\n\nkept\n.\ncut\n")
    assert done.returncode == 0, done.stderr
    first, second = spooled(dsn)
    assert first["recipients"] == ["one@example.com", "two@example.com"]
    assert "From: app@example.org" in first["body"]
    assert "kept" in second["body"]
    assert "cut" not in second["body"]


@pytest.mark.skipif(shutil.which("php") is None, reason="php-cli is not installed (make test installs it as root)")
def test_php_mail_through_sendmail_path(mtad_factory: Any, dsn: str) -> None:
    daemon = node(mtad_factory, dsn).start()
    script = 'exit(mail("customer@example.com", "Your order", "Thanks!", "From: shop@example.org") ? 0 : 1);'
    php = subprocess.run(
        ["php", "-n", "-d", f"sendmail_path={SENDMAIL} -C {daemon.config} -t -i", "-r", script],
        capture_output=True, timeout=60, env=daemon.env,
    )  # fmt: skip
    assert php.returncode == 0, php.stdout + php.stderr
    [found] = spooled(dsn)
    assert found["recipients"] == ["customer@example.com"]
    assert "Subject: Your order" in found["body"]
    assert "From: shop@example.org" in found["body"]


@pytest.mark.skipif(shutil.which("bsd-mailx") is None, reason="bsd-mailx is not installed (make test installs it)")
def test_bsd_mailx_mail_s(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    daemon = node(mtad_factory, dsn).start()
    mailrc = tmp_path / "mailrc"
    mailrc.write_text(f"set sendmail={SENDMAIL}\n")  # mailx runs it as `sendmail -i -t`
    mailx = subprocess.run(["bsd-mailx", "-s", "disk almost full", "admin@example.com"], input=b"93 % used\n",
                           capture_output=True, timeout=60, cwd=in_conf_dir(daemon, tmp_path),
                           env={**daemon.env, "MAILRC": str(mailrc)})  # fmt: skip
    assert mailx.returncode == 0, mailx.stdout + mailx.stderr
    [found] = spooled(dsn)
    assert found["recipients"] == ["admin@example.com"]
    assert "Subject: disk almost full" in found["body"]
    assert "93 % used" in found["body"]


def test_exit_statuses_as_sendmails(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    daemon = node(mtad_factory, dsn, submission='check_recipient_domains = false\nmax_message_size = "2KiB"')
    stopped = sendmail(daemon, "someone@example.com", stdin=b"Subject: x\n\ny\n")  # no daemon yet
    assert stopped.returncode == EX_TEMPFAIL
    assert b"cannot submit to 127.0.0.1:" in stopped.stderr
    daemon.start()
    usage = sendmail(daemon, stdin=b"Subject: x\n\ny\n")
    assert usage.returncode == EX_USAGE
    assert b"no recipients" in usage.stderr
    assert sendmail(daemon, "-bs", stdin=b"").returncode == EX_USAGE
    big = sendmail(daemon, "someone@example.com", stdin=b"Subject: big\n\n" + b"x" * 4000 + b"\n")
    assert big.returncode == EX_DATAERR, big.stderr
    assert b"552" in big.stderr
    refused = sendmail(daemon, "someone@example.com", "not an address", stdin=b"Subject: x\n\ny\n")
    assert refused.returncode == EX_NOUSER, refused.stderr
    assert b"RCPT TO:<not an address>" in refused.stderr
    assert spooled(dsn) == []  # all or nothing: the good recipient got nothing either
    bad = tmp_path / "bad.toml"
    bad.write_text("[sendmail]\nlogin = 'shop'\n")
    config = subprocess.run([SENDMAIL, "-C", str(bad), "a@example.com"], input=b"", capture_output=True, timeout=60)
    assert config.returncode == EX_CONFIG
    assert b"[sendmail] password_file" in config.stderr


def test_a_made_up_sender_takes_the_sendmail_domain(mtad_factory: Any, dsn: str) -> None:
    daemon = node(mtad_factory, dsn)
    named = daemon.config.read_text().replace('hostname = "mtad.test"', 'hostname = "localhost"', 1)
    daemon.config.write_text(named)  # a machine whose name is not fully qualified
    daemon.start()
    made_up = sendmail(daemon, "someone@example.com", stdin=b"Subject: x\n\ny\n")
    assert made_up.returncode == EX_DATAERR, made_up.stderr
    assert f"MAIL FROM:<{getpass.getuser()}@localhost>: 553".encode() in made_up.stderr
    assert b"give -f ADDRESS, or set [sendmail] domain" in made_up.stderr
    daemon.config.write_text(daemon.config.read_text() + '\n[sendmail]\ndomain = "host.example"\n')
    done = sendmail(daemon, "someone@example.com", stdin=b"Subject: x\n\ny\n")
    assert done.returncode == 0, done.stderr
    [found] = spooled(dsn)
    assert found["sender"] == f"{getpass.getuser()}@host.example"
    assert f"From: {getpass.getuser()}@host.example\r\n" in found["body"]


def test_auth_when_the_configuration_gives_a_login(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    secret = tmp_path / "sendmail.password"
    secret.write_text("s3cret\n")
    daemon = node(mtad_factory, dsn, f'[sendmail]\nlogin = "shop"\npassword_file = "{secret}"\n',
                  submission="check_recipient_domains = false\nrequire_auth = true").start()  # fmt: skip
    assert daemon.cli("tenants", "add", "shop", stdin="s3cret\n").returncode == 0
    done = sendmail(daemon, "-t", stdin=b"From: shop@example.org\nTo: buyer@example.com\nSubject: paid\n\nok\n")
    assert done.returncode == 0, done.stderr
    [found] = spooled(dsn)
    assert found["tenant"] == "shop"
    secret.write_text("wrong\n")
    refused = sendmail(daemon, "buyer@example.com", stdin=b"Subject: paid\n\nok\n")
    assert refused.returncode == EX_NOPERM, refused.stderr
    assert b"AUTH as shop: 535" in refused.stderr
