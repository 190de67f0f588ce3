"""`mtad accounts ...`: sending accounts added, listed, tested against a smarthost
(the test sink in smarthost mode), disabled and enabled; secrets sealed, never shown."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mtad.submission import tls_context
from tests import pg
from tests.running import Mtad
from tests.sink import ThreadedSink


@pytest.fixture
def smarthost(tls_files: tuple[Path, Path]) -> Iterator[ThreadedSink]:
    logins = {"alice@example.com": "alice-secret"}
    with ThreadedSink(("127.0.0.1",), tls=tls_context(*tls_files), logins=logins) as started:
        yield started


def stored_secrets(dsn: str) -> list[bytes]:
    return [bytes(r["secret"]) for r in pg.rows(dsn, "SELECT secret FROM accounts ORDER BY id")]


def test_accounts_are_added_listed_tested_and_switched_off_and_on(
    mtad_factory: Any, dsn: str, smarthost: ThreadedSink, tls_files: tuple[Path, Path], tmp_path: Path
) -> None:
    keyless: Mtad = mtad_factory(f'dsn = "{dsn}"')
    key = keyless.cli("accounts", "key")
    assert key.returncode == 0, key.stderr
    (tmp_path / "accounts.key").write_text(key.stdout)
    refused = keyless.cli("accounts", "add", "x", "--address", "x@example.com", "--pool", "p", "--host", "localhost",
                          "--login", "x", stdin="pw\n")  # fmt: skip
    assert refused.returncode == 1
    assert "[accounts] key_file or key_env" in refused.stderr

    # The smarthost's self-signed certificate is trusted through the pool's ca_file alone.
    pools = f'[account_pools.outreach]\ndaily_cap = 40\nmin_gap = "3m"\nca_file = "{tls_files[0]}"\n'
    env = {"SSL_CERT_FILE": "/nonexistent"}  # not the system's store either
    cli: Mtad = mtad_factory(f'dsn = "{dsn}"', f'[accounts]\nkey_file = "{tmp_path / "accounts.key"}"\n{pools}',
                             env=env)  # fmt: skip
    for name, secret in (("alice", "alice-secret"), ("bob", "wrong-secret")):
        added = cli.cli("accounts", "add", name, "--address", f"{name}@example.com", "--pool", "outreach",
                        "--host", "localhost", "--port", str(smarthost.port), "--login", f"{name}@example.com",
                        "--daily-cap", "15", "--min-gap", "2", "--jitter", "1:3", stdin=f"{secret}\n")  # fmt: skip
        assert added.returncode == 0, added.stderr
    assert all(b"secret" not in sealed for sealed in stored_secrets(dsn))  # sealed at rest
    carol = cli.cli("accounts", "add", "carol", "--address", "carol@example.com", "--pool", "outreach", "--host",
                    "localhost", "--login", "carol", "--daily-cap", "20", stdin="pw\n")  # fmt: skip
    assert carol.returncode == 0, carol.stderr
    unknown = cli.cli("accounts", "add", "dave", "--address", "d@example.com", "--pool", "nope", "--host",
                      "localhost", "--login", "d", stdin="pw\n")  # fmt: skip
    assert unknown.returncode == 2
    assert "--pool: no account pool named 'nope' (configured: outreach)" in unknown.stderr

    listing = cli.cli("accounts", "ls", "--json")
    assert listing.returncode == 0, listing.stderr
    assert "secret" not in listing.stdout
    rows = {r["name"]: r for r in map(json.loads, listing.stdout.splitlines())}
    assert (rows["alice"]["pool"], rows["alice"]["state"], rows["alice"]["today"]) == ("outreach", "active", 0)
    assert (rows["alice"]["daily_cap"], rows["alice"]["min_gap"], rows["alice"]["health"]) == (15, 2.0, 100)
    assert (rows["carol"]["daily_cap"], rows["carol"]["min_gap"]) == (20, 180.0)  # the pool's gap

    ok = cli.cli("accounts", "test", "alice")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "logged in to localhost" in ok.stdout
    bad = cli.cli("accounts", "test", "bob")
    assert bad.returncode == 1
    assert "535 5.7.8" in bad.stdout
    assert "secret" not in ok.stdout + ok.stderr + bad.stdout + bad.stderr
    assert smarthost.received == []  # a test sends nothing

    assert "is disabled" in cli.cli("accounts", "disable", "alice", "--reason", "on leave").stdout
    shown = json.loads(cli.cli("accounts", "show", "alice", "--json").stdout)
    assert (shown["state"], shown["reason"]) == ("disabled", "on leave")
    assert "is active" in cli.cli("accounts", "enable", "alice").stdout
    missing = cli.cli("accounts", "show", "nobody")
    assert missing.returncode == 1
    assert "no account 'nobody'" in missing.stderr
