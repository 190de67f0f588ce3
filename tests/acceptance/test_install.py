"""The packaged install, as docs/operations.md (Install as a service) does it: `pip
install .` (not editable) into a virtualenv of its own, the configuration in a directory
of its own, every command run from `/` as systemd runs the daemon."""

from __future__ import annotations

import json
import shutil
import smtplib
import subprocess
import sys
import sysconfig
from email.policy import SMTP
from pathlib import Path

import pytest

from tests.mail import email
from tests.running import Mtad

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
NOT_SHIPPED = shutil.ignore_patterns(
    ".git", ".venv", ".venv-tools", "build", "*.egg-info", "var", "__pycache__", ".*_cache"
)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with mtad installed from a copy of the source tree (no editable
    link to it); the packages mtad depends on come from the test environment."""
    where = tmp_path_factory.mktemp("install")
    source = where / "source"
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--no-deps", str(source)], check=True, cwd="/",
                   timeout=300)  # fmt: skip
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c", ask], check=True, capture_output=True,
                             text=True).stdout.strip()  # fmt: skip
    (Path(purelib) / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def command(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv / "bin" / "mtad"), *args], capture_output=True, text=True, cwd="/", timeout=120)


def test_a_packaged_install_runs_from_its_own_directories(installed: Path, dsn: str, tmp_path: Path) -> None:
    where = subprocess.run([str(installed / "bin" / "python"), "-c", "import mtad; print(mtad.__file__)"],
                           capture_output=True, text=True, cwd="/", check=True).stdout  # fmt: skip
    assert where.startswith(str(installed)), where  # the installed copy, not the source tree
    ask = "from mtad.db import migrate; print(len(migrate.available()), len(migrate.functions()))"
    shipped = subprocess.run([str(installed / "bin" / "python"), "-c", ask], capture_output=True, text=True, cwd="/",
                             check=True).stdout.split()  # fmt: skip
    sql = ROOT / "mtad"
    assert shipped == [str(len(list(sql.glob("migrations/*.sql")))), str(len(list(sql.glob("sql/functions/*.sql"))))]

    # Commands that need no configuration ask for none.
    key = command(installed, "accounts", "key")
    assert key.returncode == 0, key.stderr
    assert len(key.stdout.strip()) == 44

    etc = tmp_path / "etc" / "mtad"
    etc.mkdir(parents=True)
    config = etc / "mtad.toml"
    config.write_text(
        f'[database]\ndsn = "{dsn}"\n[submission]\nlisten = ["127.0.0.1:0"]\ncheck_recipient_domains = false\n'
        '[http]\nlisten = ""\n[log]\nformat = "json"\n[delivery]\nenabled = false\n'
    )  # the provider and reply tables: the ones shipped inside the package
    checked = command(installed, "check-config", "--config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr

    daemon = Mtad(config, python=str(installed / "bin" / "python"), cwd=Path("/")).start()
    try:
        with smtplib.SMTP("127.0.0.1", daemon.smtp_port, timeout=30) as client:
            client.sendmail("app@example.org", ["someone@example.com"], email("packaged").as_bytes(policy=SMTP))
        listed = command(installed, "queue", "ls", "--json", "--config", str(config))
        assert listed.returncode == 0, listed.stderr
        [row] = [json.loads(line) for line in listed.stdout.splitlines()]
        assert (row["recipient"], row["state"]) == ("someone@example.com", "queued")
    finally:
        assert daemon.stop() == 0


def test_the_reference_configuration_checks_as_it_is_from_another_directory(installed: Path, tmp_path: Path) -> None:
    etc = tmp_path / "etc" / "mtad"
    etc.mkdir(parents=True)
    shutil.copy(ROOT / "conf" / "mtad.toml", etc / "mtad.toml")
    checked = command(installed, "check-config", "--config", str(etc / "mtad.toml"))
    assert checked.returncode == 0, checked.stdout + checked.stderr
