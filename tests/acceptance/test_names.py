"""The names an operator gives the command line are checked: a tenant, source pool,
account pool, provider group, account, webhook endpoint or source address that does
not exist is refused with the closest known one and exit status 1, and nothing is
done; the default tenant needs no row, a configured provider group no mail yet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mtad.deliver import settings as deliver_settings
from tests.running import Mtad

pytestmark = pytest.mark.slow

MEANT = [  # (the command, what it says on standard error)
    (("tenants", "pause", "shpo"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("tenants", "resume", "shpo"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("tenants", "show", "shpo"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("tenants", "probation", "shpo", "on"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("suspend", "--tenant", "shpo"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("suspend", "--provider", "gogle"), "no provider group 'gogle' is configured or was routed to (did you mean "
                                         "'google'?)"),
    (("suspend", "--provider", "nosuchgroup"), "no provider group 'nosuchgroup' is configured or was routed to"),
    (("suspend", "--pool", "mian"), "no source pool 'mian' (did you mean 'main'?)"),
    (("suspend", "--source", "10.9.8.7"), "no source pool has the address 10.9.8.7 (known: 127.0.0.10, 127.0.0.11)"),
    (("suspend", "--account", "alcie"), "no account 'alcie' (did you mean 'alice'?)"),
    (("resume", "--pool", "main"), "pool main is not suspended"),
    (("queue", "reroute", "--provider", "google", "--pool", "spar"), "no source pool 'spar' (did you mean 'spare'?)"),
    (("queue", "reroute", "--provider", "gogle", "--pool", "spare"), "(did you mean 'google'?)"),
    (("queue", "reroute", "--provider", "google", "--back"), "provider group google is not rerouted"),
    (("queue", "ls", "--provider", "gogle"), "(did you mean 'google'?)"),
    (("webhooks", "add", "shpo", "https://hooks.example.com/in"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("webhooks", "rm", "7"), "no webhook endpoint 7"),
    (("webhooks", "replay", "shpo", "--since", "1h"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("suppress", "add", "x@example.com", "--tenant", "shpo"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("events", "tail", "--tenant", "shpo"), "no tenant 'shpo' (did you mean 'shop'?)"),
    (("accounts", "disable", "alcie"), "no account 'alcie' (did you mean 'alice'?)"),
    (("accounts", "ls", "--pool", "outrech"), "no account pool 'outrech' (did you mean 'outreach'?)"),
]  # fmt: skip


def test_unknown_names_are_refused_with_the_name_meant(mtad_factory: Any, dsn: str, tmp_path: Path) -> None:
    key = tmp_path / "accounts.key"
    extra = (f'[pools.main]\naddresses = ["127.0.0.11"]\n[pools.spare]\naddresses = ["127.0.0.10"]\n'
             f'[account_pools.outreach]\n[accounts]\nkey_file = "{key}"\n')  # fmt: skip
    cli: Mtad = mtad_factory(f'dsn = "{dsn}"', extra, providers=deliver_settings.shipped_table("providers"))
    key.write_text(cli.cli("accounts", "key").stdout)
    assert cli.cli("tenants", "add", "shop", stdin="pw\n").returncode == 0
    added = cli.cli("accounts", "add", "alice", "--address", "alice@example.com", "--pool", "outreach", "--host",
                    "localhost", "--login", "alice", stdin="pw\n")  # fmt: skip
    assert added.returncode == 0, added.stderr

    for command, says in MEANT:
        done = cli.cli(*command)
        assert (done.returncode, done.stdout) == (1, ""), (command, done.stderr)
        assert says in done.stderr, command
    csv = tmp_path / "list.csv"
    csv.write_text("address,tenant,reason,created\na@example.com,shop,,\nb@example.com,shpo,,\n")
    imported = cli.cli("suppress", "import", str(csv))
    assert (imported.returncode, imported.stderr.strip()) == (1, "mtad: line 3: tenant: no tenant 'shpo' (did you "
                                                                 "mean 'shop'?)")  # fmt: skip

    # Nothing was done.
    assert [json.loads(line)["name"] for line in cli.cli("tenants", "ls", "--json").stdout.splitlines()] == ["shop"]
    assert cli.cli("suspensions", "ls", "--json").stdout == ""
    assert cli.cli("suppress", "ls", "--json").stdout == ""
    assert json.loads(cli.cli("accounts", "show", "alice", "--json").stdout)["state"] == "active"

    # What exists is taken: the default tenant (no row), a configured group (no mail yet), an address of a pool.
    for flag, name in (("--tenant", "default"), ("--provider", "google"), ("--source", "127.0.0.10")):
        assert cli.cli("suspend", flag, name).returncode == 0, name
        resumed = cli.cli("resume", flag, name)
        assert resumed.returncode == 0, resumed.stderr
        assert f"resumed {flag[2:]} {name}; 0 deliveries due now" in resumed.stdout
    assert cli.cli("tenants", "show", "default").returncode == 0
