import ipaddress
import os
import re
import tomllib
from pathlib import Path

import pytest

from mtad import config, submission
from mtad.base import errors, values
from mtad.base.endpoints import HostPort
from mtad.deliver import settings as deliver_settings
from tests.certs import self_signed

REFERENCE = Path(__file__).parents[2] / "conf" / "mtad.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mtad.toml"
    path.write_text(text)
    return path


def test_the_reference_file_loads_with_its_documented_values() -> None:
    settings = config.load(REFERENCE, environ={})
    assert settings.database.dsn is None
    assert settings.database.data_dir == REFERENCE.resolve().parents[1] / "var" / "pgdata"  # beside conf/
    assert settings.submission.listen == (HostPort("127.0.0.1", 2525),)
    assert settings.submission.max_message_size == 25 * 1024 * 1024
    assert settings.submission.max_recipients == 100
    assert ipaddress.ip_network("127.0.0.0/8") in settings.submission.trusted_networks
    assert settings.submission.require_auth is False
    assert settings.spool.commit_window == 0
    assert settings.spool.commit_max_batch_bytes == 1024 * 1024
    assert settings.http.listen == HostPort("127.0.0.1", 9108)
    assert (settings.log.format, settings.log.level) == ("auto", "info")
    assert settings.node.id


def test_the_reference_file_shows_every_declared_key_with_its_default_and_no_other() -> None:
    """Each package declares its sections once (mtad.base.settings); conf/mtad.toml shows
    every key with its default, and holds no key that is not declared."""
    document = tomllib.loads(REFERENCE.read_text())
    text = REFERENCE.read_text()
    unset = {("database", "data_dir")}  # its default depends on where the file is: shown commented out
    assert set(config.SCHEMA) == set(document) - set(config.DYNAMIC_SECTIONS)
    for section, keys in config.SCHEMA.items():
        shown = document[section]
        assert set(shown) == set(keys) - {k for s, k in unset if s == section}, section
        for key, declared in keys.items():
            if (section, key) in unset:
                assert f"\n# {key} = " in text
            else:
                assert shown[key] == declared.default, f"[{section}] {key}: {shown[key]!r} != {declared.default!r}"
            assert declared.help
            assert len(declared.help.splitlines()) == 1


DOCS = Path(__file__).parents[2] / "docs" / "configuration.md"


def documented(text: str) -> dict[str, dict[str, str]]:
    """The key tables of the configuration page: section -> key -> its default as shown."""
    found: dict[str, dict[str, str]] = {}
    section = None
    for line in text.splitlines():
        heading = re.fullmatch(r"### \[([a-z_]+)\]", line.strip())
        if heading is not None:
            section = heading.group(1)
            found[section] = {}
        elif line.startswith("#"):
            section = None
        elif section is not None and (row := re.match(r"\| `([a-z_]+)` \| (.*?) \|", line)):
            found[section][row.group(1)] = row.group(2).strip()
    return found


def test_the_configuration_page_shows_every_declared_key_with_its_default_and_no_other() -> None:
    shown = documented(DOCS.read_text())
    assert set(config.SCHEMA) <= set(shown)
    for section, keys in config.SCHEMA.items():
        assert set(shown[section]) == set(keys), section
        for key, declared in keys.items():
            if (section, key) == ("database", "data_dir"):
                continue  # its default depends on where the file is
            value = shown[section][key].strip("`")
            assert tomllib.loads(f"v = {value}")["v"] == declared.default, f"[{section}] {key}: {value}"


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[database]
pool_size = "many"
[submission]
listen = ["127.0.0.1"]
max_message_size = "25 parsecs"
trusted_networks = ["10.0.0.1/8"]
require_auth = "yes"
idle_timout = "5m"
[log]
format = "xml"
[bogus]
x = 1
""",
    )
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    problems = "\n".join(info.value.problems)
    for expected in [
        "[database] pool_size: expected a whole number",
        '[submission] listen: expected "host:port"',
        "[submission] max_message_size: expected a size",
        "[submission] trusted_networks: '10.0.0.1/8' is not a network",
        "[submission] require_auth: expected true or false",
        "[submission] idle_timout: unknown key (did you mean 'idle_timeout'?)",
        "[log] format: expected one of auto, json, console",
        "[bogus]: unknown section",
    ]:
        assert expected in problems
    assert len(info.value.problems) == 8


def test_connection_caps_are_whole_numbers_of_at_least_one(tmp_path: Path) -> None:
    defaults = config.load(write(tmp_path, ""), environ={}).submission
    assert (defaults.max_connections_per_client, defaults.max_connections) == (100, 10_000)
    given = config.load(write(tmp_path, "[submission]\nmax_connections_per_client = 5\nmax_connections = 50\n"),
                        environ={}).submission  # fmt: skip
    assert (given.max_connections_per_client, given.max_connections) == (5, 50)
    for value in ("0", "-1", "1.5", '"many"', "true"):
        text = f"[submission]\nmax_connections_per_client = {value}\nmax_connections = {value}\n"
        with pytest.raises(errors.ConfigError) as info:
            config.load(write(tmp_path, text), environ={})
        assert [p.split(":")[0] for p in info.value.problems] == [
            "[submission] max_connections_per_client",
            "[submission] max_connections",
        ], value
    with pytest.raises(errors.ConfigError, match="MTAD_SUBMISSION_MAX_CONNECTIONS: "):
        config.load(write(tmp_path, ""), environ={"MTAD_SUBMISSION_MAX_CONNECTIONS": "0"})


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, '[database]\ndsn = "postgresql://file/db"\n[submission]\nmax_recipients = 5\n')
    settings = config.load(
        path,
        environ={
            "MTAD_DATABASE_DSN": "postgresql://env/db",
            "MTAD_SUBMISSION_MAX_RECIPIENTS": "7",
            "MTAD_SUBMISSION_LISTEN": '["127.0.0.1:25", "[::1]:25"]',
            "MTAD_SUBMISSION_TRUSTED_NETWORKS": "10.0.0.0/8, 192.168.0.0/16",
            "MTAD_SUBMISSION_REQUIRE_AUTH": "true",
            "MTAD_SPOOL_COMMIT_WINDOW": "5ms",
            "MTAD_TEST_DSN": "ignored: not a configuration variable",
        },
    )
    assert settings.database.dsn == "postgresql://env/db"
    assert settings.submission.max_recipients == 7
    assert settings.submission.listen == (HostPort("127.0.0.1", 25), HostPort("::1", 25))
    assert len(settings.submission.trusted_networks) == 2
    assert settings.submission.require_auth is True
    assert settings.spool.commit_window == pytest.approx(0.005)


def test_a_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "")
    with pytest.raises(errors.ConfigError) as info:
        config.load(
            path,
            environ={
                "MTAD_SUBMISSION_MAX_RECIPIENTS": "lots",
                "MTAD_LOG_COLOUR": "red",
                "MTAD_SPOOL_COMMIT_MAX_BATCH_BYTES": "0",
            },
        )
    problems = "\n".join(info.value.problems)
    assert "MTAD_SPOOL_COMMIT_MAX_BATCH_BYTES: a size must be larger than zero" in problems
    assert "MTAD_SUBMISSION_MAX_RECIPIENTS: expected a whole number" in problems
    assert "MTAD_LOG_COLOUR: unknown key 'colour' in [log]" in problems


def test_a_misspelt_environment_variable_is_refused_with_the_one_meant(tmp_path: Path) -> None:
    path = write(tmp_path, '[accounts]\nkey_env = "MTAD_SEALING_KEY"\n')
    misspelt = {"MTAD_DATABSE_DSN": "postgresql://env/db", "MTAD_SUBMISION_MAX_RECIPIENTS": "7", "MTAD_X": "1"}
    for load in (config.load, config.load_basics):
        with pytest.raises(errors.ConfigError) as info:
            load(path, environ=misspelt)
        assert sorted(info.value.problems) == [
            "MTAD_DATABSE_DSN: not a configuration variable (MTAD_<SECTION>_<KEY>) (did you mean 'MTAD_DATABASE_DSN'?)",
            "MTAD_SUBMISION_MAX_RECIPIENTS: not a configuration variable (MTAD_<SECTION>_<KEY>) "
            "(did you mean 'MTAD_SUBMISSION_MAX_RECIPIENTS'?)",
            "MTAD_X: not a configuration variable (MTAD_<SECTION>_<KEY>)",
        ]
    # Not configuration, and left alone: the test suite's server, and the variable key_env names.
    others = {"MTAD_TEST_DSN": "postgresql://tests/db", "MTAD_SEALING_KEY": "a key"}
    assert config.load(path, environ=others).accounts.key_env == "MTAD_SEALING_KEY"
    named = {"MTAD_ACCOUNTS_KEY_ENV": "MTAD_ACCOUNTS_KEY", "MTAD_ACCOUNTS_KEY": "a key"}
    assert config.load(write(tmp_path, ""), environ=named).accounts.key_env == "MTAD_ACCOUNTS_KEY"


def test_tls_needs_both_files_and_they_must_load(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="set both or neither"):
        config.load(write(tmp_path, '[tls]\ncert = "/nonexistent/cert.pem"\n'), environ={})
    with pytest.raises(errors.ConfigError, match="cannot load"):
        config.load(write(tmp_path, '[tls]\ncert = "/nonexistent/c.pem"\nkey = "/nonexistent/k.pem"\n'), environ={})


def test_a_lease_too_short_to_renew_is_refused_naming_the_key(tmp_path: Path) -> None:
    """Renewed every third of itself, a lease must outlast one renewal's wait for the
    database; it need not cover the attempt, which renewal keeps covered."""
    with pytest.raises(errors.ConfigError, match=r"\[delivery\] lease_duration: 3s is too short; at least 7.5s"):
        config.load(write(tmp_path, '[delivery]\nlease_duration = "3s"\n'), environ={})
    with pytest.raises(errors.ConfigError, match="MTAD_DELIVERY_LEASE_DURATION: 1s is too short"):
        config.load(write(tmp_path, ""), environ={"MTAD_DELIVERY_LEASE_DURATION": "1s"})
    slow = '[delivery]\nlease_duration = "20s"\ncommand_timeout = "60s"\n'  # slower replies than the lease
    assert config.load(write(tmp_path, slow), environ={}).delivery.engine.lease_duration == 20


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError, match="cannot read"):
        config.load(tmp_path / "missing.toml", environ={})
    with pytest.raises(errors.ConfigError, match="not valid TOML"):
        config.load(write(tmp_path, "[database\n"), environ={})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("30s", 30), ("5m", 300), ("2h", 7200), ("7d", 604800), ("1h30m", 5400), (12, 12), (0.5, 0.5)],
)
def test_durations(text: str | float, seconds: float) -> None:
    assert values.duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5 minutes", "", "-3s", "1x", True])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        values.duration(text)


@pytest.mark.parametrize(
    ("text", "octets"), [(1000, 1000), ("25MiB", 25 * 2**20), ("10MB", 10**7), ("512KiB", 2**19), ("7", 7)]
)
def test_sizes(text: str | int, octets: int) -> None:
    assert values.size(text) == octets


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:25", HostPort("127.0.0.1", 25)), ("[::1]:2525", HostPort("::1", 2525)), ("mx.example:0", None)],
)
def test_host_port(text: str, expected: HostPort | None) -> None:
    assert values.host_port(text) == (expected or HostPort("mx.example", 0))


@pytest.mark.parametrize("text", ["127.0.0.1", "127.0.0.1:99999", "::1:25", "bad host:25"])
def test_bad_host_port(text: str) -> None:
    with pytest.raises(ValueError, match=r"host|port|range|IP"):
        values.host_port(text)


def test_delivery_settings_routes_and_files(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        f"""
[delivery]
providers = "{deliver_settings.shipped_table("providers")}"
replies = "{deliver_settings.shipped_table("replies")}"
retry = "1m, 5m*2, 1h"
source_address = "127.0.0.7"
[tls]
outbound = "required"
[routes."Example.ORG"]
relay = "127.0.0.1:2526"
""",
    )
    settings = config.load(path, environ={})
    assert settings.delivery.engine.retry.delays == (60, 300, 300, 3600)
    assert settings.delivery.routes == {"example.org": HostPort("127.0.0.1", 2526)}
    assert settings.delivery.sessions.tls_required
    assert settings.delivery.sessions.source_address == "127.0.0.7"
    assert settings.delivery.engine.node == settings.node.id
    assert any(p.name == "google" for p in settings.delivery.providers.known)


def test_delivery_problems_are_reported_with_the_rest(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[delivery]
providers = "/nonexistent/providers.toml"
retry = "5m, soon"
source_address = "not-an-ip"
[routes."exa mple.org"]
relay = "x:1"
[routes."example.net"]
relay = "nohost"
""",
    )
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    problems = "\n".join(info.value.problems)
    assert "[delivery] retry: expected a duration" in problems
    assert "[delivery] source_address: 'not-an-ip' is not an IP address" in problems
    assert "[delivery] providers:" in problems
    assert '[routes."exa mple.org"]' in problems
    assert '[routes."example.net"] relay: expected "host:port"' in problems


POOLS = """
[pools.transactional]
addresses = ["192.0.2.10"]
[pools.bulk]
addresses = ["192.0.2.20"]
"""


def test_tenant_defaults_and_pool_names_reach_the_submission_settings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        POOLS
        + """
[tenants."shop"]
priority = -20
pool = "bulk"
weight = 3
[tenants."alerts"]
priority = 100
campaign_max_per_hour = 500
campaign_max_per_day = 5000
[tenants."default"]
pool = "transactional"
[tenants."quiet"]
pool = ""
""",
    )
    settings = config.load(path, environ={})
    assert settings.submission.pools == frozenset({"transactional", "bulk"})
    assert settings.submission.tenant_defaults == {
        "shop": submission.TenantDefaults(priority=-20, pool="bulk"),
        "alerts": submission.TenantDefaults(
            priority=100, pool=None, campaign_max_per_hour=500, campaign_max_per_day=5000
        ),
        "default": submission.TenantDefaults(priority=0, pool="transactional"),
        "quiet": submission.TenantDefaults(priority=0, pool=None),
    }
    assert settings.delivery.engine.tenant_weights == {"shop": 3, "alerts": 1, "default": 1, "quiet": 1}


def test_without_tenants_or_pools_nothing_is_set(tmp_path: Path) -> None:
    settings = config.load(write(tmp_path, ""), environ={})
    assert settings.submission.pools == frozenset()
    assert settings.submission.tenant_defaults == {}


def test_tenant_problems_name_the_table_and_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        POOLS
        + """
[tenants."shop"]
priority = 101
pool = "x"
weight = 0
campaign_max_per_hour = 0
[tenants."news"]
priority = "high"
pool = 3
prio = 1
[tenants."bad name"]
priority = 1
[tenants."flat"]
[tenants.list]
x = 1
""",
    )
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    problems = "\n".join(info.value.problems)
    for expected in [
        '[tenants."shop"] priority: must be between -100 and 100, got 101',
        "[tenants.\"shop\"] pool: no pool named 'x' (configured: bulk, transactional)",
        '[tenants."news"] priority: expected a whole number',
        '[tenants."news"] pool: expected a pool name, got 3',
        "[tenants.\"news\"] prio: unknown key (did you mean 'priority'?)",
        "[tenants.\"bad name\"]: invalid tenant name 'bad name'",
        '[tenants."list"] x: unknown key',
        '[tenants."shop"] weight: must be between 1 and 100, got 0',
        '[tenants."shop"] campaign_max_per_hour: must be between 1 and 2147483647, got 0',
    ]:
        assert expected in problems
    assert len(info.value.problems) == 9  # [tenants."flat"] is an empty table: the defaults


def test_a_tenant_pool_needs_configured_pools(tmp_path: Path) -> None:
    path = write(tmp_path, '[tenants."shop"]\npool = "bulk"\n')
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    assert info.value.problems == ("[tenants.\"shop\"] pool: no pool named 'bulk' (no [pools] are configured)",)


def test_tenants_must_be_tables(tmp_path: Path) -> None:
    with pytest.raises(errors.ConfigError) as info:
        config.load(write(tmp_path, "tenants = 3\n"), environ={})
    assert info.value.problems == ('[tenants]: expected tables such as [tenants."shop"]',)
    with pytest.raises(errors.ConfigError) as info:
        config.load(write(tmp_path, '[tenants]\nshop = "bulk"\n'), environ={})
    assert info.value.problems == ('[tenants."shop"]: expected a table such as priority = 10, pool = "bulk"',)


def test_pools_routes_and_the_default_pool_reach_the_delivery_settings(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        POOLS
        + """
[routes."example.org"]
pool = "bulk"
[routes."example.net"]
relay = "127.0.0.1:2526"
pool = "transactional"
[delivery]
default_pool = "transactional"
""",
    )
    settings = config.load(path, environ={})
    assert set(settings.delivery.pools) == {"transactional", "bulk"}
    assert settings.delivery.pools["bulk"].addresses == ("192.0.2.20",)
    assert settings.delivery.engine.route_pools == {"example.org": "bulk", "example.net": "transactional"}
    assert set(settings.delivery.routes) == {"example.net"}  # a relay only where one is given
    assert settings.delivery.engine.default_pool == "transactional"


def test_pool_names_given_elsewhere_must_be_configured(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        POOLS
        + """
[routes."example.org"]
pool = "marketing"
[routes."example.com"]
via = "x"
[pools.broken]
addresses = []
[delivery]
default_pool = "nope"
""",
    )
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    problems = "\n".join(info.value.problems)
    for expected in [
        "[delivery] default_pool: no pool named 'nope' (configured: bulk, transactional)",
        "[routes.\"example.org\"] pool: no pool named 'marketing' (configured: bulk, transactional)",
        '[routes."example.com"]: expected relay = "host:port", pool = "NAME", account_pool = "NAME"',
        "[pools.broken] addresses: must list at least one address",
    ]:
        assert expected in problems


def test_account_pools_reach_the_relay_settings_and_names_given_elsewhere_must_be_configured(tmp_path: Path) -> None:
    path = write(tmp_path, """
[accounts]
key_env = "MTAD_KEY"
cooldown = "30m"
breaker_failures = 3
[account_pools.outreach]
rewrite_from = true
daily_cap = 500
min_gap = "7m"
jitter = ["25s", "45s"]
time_zone = "Europe/Paris"
health_floor = 30
[account_pools.plain]
[tenants."shop"]
account_pool = "outreach"
[routes."example.org"]
account_pool = "plain"
""")  # fmt: skip
    settings = config.load(path, environ={})
    relay = settings.delivery.relay
    outreach = relay.pools["outreach"]
    assert (outreach.rewrite_from, outreach.time_zone) == (True, "Europe/Paris")
    assert (outreach.defaults.daily_cap, outreach.defaults.min_gap, outreach.defaults.jitter) == (
        500,
        420.0,
        (25.0, 45.0),
    )
    assert relay.pools["plain"].rewrite_from is False
    assert (outreach.health_floor, relay.pools["plain"].health_floor) == (30, 50)  # 50: the default
    assert (relay.cooldown, relay.gmail_cooldown, relay.breaker.failures) == (1800.0, 14400.0, 3)
    assert settings.submission.account_pools == frozenset({"outreach", "plain"})
    assert settings.submission.tenant_defaults["shop"].account_pool == "outreach"
    assert settings.delivery.engine.route_account_pools == {"example.org": "plain"}


def test_bad_account_pools_are_refused_naming_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, """
[account_pools.outreach]
daily_cap = 0
jitter = ["45s", "25s"]
time_zone = "Mars/Olympus"
colour = "red"
health_floor = 101
[tenants."shop"]
account_pool = "cold"
[routes."example.org"]
account_pool = "cold"
""")  # fmt: skip
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    problems = "\n".join(info.value.problems)
    for expected in [
        "[account_pools.outreach] daily_cap:",
        "[account_pools.outreach] jitter: expected [low, high]",
        "[account_pools.outreach]: unknown time zone 'Mars/Olympus'",
        "[account_pools.outreach] colour: unknown key",
        "[account_pools.outreach] health_floor: must be between 0 and 100, got 101",
        "[tenants.\"shop\"] account_pool: no account pool named 'cold'",
        "[routes.\"example.org\"] account_pool: no account pool named 'cold'",
    ]:
        assert expected in problems
    keyless = write(tmp_path, '[database]\ndsn = "postgresql:///x"\n[account_pools.outreach]\n')  # embedded: its own
    with pytest.raises(errors.ConfigError) as info:
        config.load(keyless, environ={})
    assert info.value.problems[0].startswith("[accounts] key_file or key_env: [account_pools] are configured")


def test_submission_processes_are_a_number_or_auto(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def processes(value: str) -> int:
        return config.load(write(tmp_path, f"[submission]\nprocesses = {value}\n"), environ={}).submission.processes

    assert processes("0") == 0
    assert processes("3") == 3
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert processes('"auto"') == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert processes('"auto"') == 0  # one core: the daemon's own process serves the port
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert processes('"auto"') == 4
    assert config.load(REFERENCE, environ={"MTAD_SUBMISSION_PROCESSES": "2"}).submission.processes == 2
    for bad, why in (("65", "between 0 and 64"), ('"many"', 'or "auto"'), ("-1", "between 0 and 64")):
        with pytest.raises(errors.ConfigError) as info:
            processes(bad)
        assert any("[submission] processes" in p and why in p for p in info.value.problems), info.value.problems


def test_a_pool_trusts_its_ca_file_and_a_pool_that_names_none_the_tls_one(tmp_path: Path) -> None:
    (tmp_path / "own").mkdir()
    (tmp_path / "global").mkdir()
    own, _ = self_signed(tmp_path / "own")
    default, _ = self_signed(tmp_path / "global")
    path = write(tmp_path, f"""
[tls]
ca_file = "{default}"
[accounts]
key_env = "MTAD_KEY"
[account_pools.outreach]
ca_file = "{own}"
[account_pools.plain]
""")  # fmt: skip
    relay = config.load(path, environ={}).delivery.relay
    assert (relay.pools["outreach"].ca_file, relay.pools["plain"].ca_file, relay.ca_file) == (own, None, default)
    assert relay.ca_file_of("outreach") == own
    assert relay.ca_file_of("plain") == default
    assert relay.ca_file_of("unconfigured") == default
    assert config.load(REFERENCE, environ={}).delivery.relay.ca_file_of("outreach") is None  # the system's store


def test_a_missing_or_non_pem_ca_file_is_a_problem_naming_the_key(tmp_path: Path) -> None:
    text = tmp_path / "ca.txt"
    text.write_text("not a certificate\n")
    path = write(tmp_path, f"""
[tls]
ca_file = "{tmp_path / "missing.pem"}"
[accounts]
key_env = "MTAD_KEY"
[account_pools.outreach]
ca_file = "{text}"
[account_pools.cold]
ca_file = "{tmp_path}"
""")  # fmt: skip
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    problems = "\n".join(info.value.problems)
    for expected in [
        f"[tls] ca_file: cannot load {tmp_path / 'missing.pem'}: No such file or directory",
        f"[account_pools.outreach] ca_file: cannot load {text}: [X509: NO_CERTIFICATE_OR_CRL_FOUND]",
        f"[account_pools.cold] ca_file: cannot load {tmp_path}: Is a directory",
    ]:
        assert expected in problems
    with pytest.raises(errors.ConfigError) as info:
        config.load(write(tmp_path, ""), environ={"MTAD_TLS_CA_FILE": str(text)})
    assert info.value.problems[0].startswith(f"MTAD_TLS_CA_FILE: cannot load {text}:")


def test_relative_paths_are_relative_to_the_file_and_the_tables_ship_with_mtad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tls_files: tuple[Path, Path]
) -> None:
    home = tmp_path / "etc" / "mtad"
    (home / "tables").mkdir(parents=True)
    (home / "tables" / "providers.toml").write_text(deliver_settings.shipped_table("providers").read_text())
    (home / "ca.pem").write_text(tls_files[0].read_text())
    path = home / "mtad.toml"
    path.write_text(
        '[database]\ndata_dir = "state/pgdata"\n[delivery]\nproviders = "tables/providers.toml"\n'
        '[accounts]\nkey_env = "K"\n[account_pools.p]\nca_file = "ca.pem"\n'
    )
    monkeypatch.chdir("/")  # as systemd starts it
    settings = config.load(path, environ={})
    assert settings.database.data_dir == home / "state" / "pgdata"
    assert settings.delivery.relay.pools["p"].ca_file == home / "ca.pem"
    assert any(p.name == "google" for p in settings.delivery.providers.known)  # the copy beside the file
    # An empty table name is the table shipped with mtad; a relative path from the
    # environment is relative to the working directory.
    path.write_text('[delivery]\nproviders = ""\n')
    settings = config.load(path, environ={"MTAD_DATABASE_DATA_DIR": "var/pg"})
    assert any(p.name == "google" for p in settings.delivery.providers.known)
    assert settings.database.data_dir == Path("var/pg")
    # Unset, the data directory is found beside the file: an etc/NAME/ has its var/lib/NAME.
    assert config.load(path, environ={}).database.data_dir == tmp_path / "var" / "lib" / "mtad" / "pgdata"


def test_the_reference_file_works_as_it_is_from_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "etc" / "mtad" / "mtad.toml"
    copy.parent.mkdir(parents=True)
    copy.write_text(REFERENCE.read_text())
    monkeypatch.chdir("/")
    settings = config.load(copy, environ={})
    assert settings.database.data_dir == tmp_path / "var" / "lib" / "mtad" / "pgdata"  # as /etc/mtad: /var/lib/mtad
    assert settings.accounts.key_file == tmp_path / "var" / "lib" / "mtad" / "accounts.key"
    assert any(p.name == "google" for p in settings.delivery.providers.known)
    basics = config.load_basics(copy, environ={})  # what a tool reads: the same spool
    assert basics.database == settings.database


def test_an_unset_data_dir_is_found_beside_the_file() -> None:
    assert config.default_data_dir(Path("/etc/mtad/mtad.toml")) == Path("/var/lib/mtad/pgdata")
    assert config.default_data_dir(Path("/etc/mtad-b/mtad.toml")) == Path("/var/lib/mtad-b/pgdata")
    assert config.default_data_dir(Path("/etc/mtad.toml")) == Path("/var/lib/mtad/pgdata")
    assert config.default_data_dir(Path("/opt/mtad/etc/mtad/mtad.toml")) == Path("/opt/mtad/var/lib/mtad/pgdata")
    assert config.default_data_dir(Path("/srv/mtad/conf/mtad.toml")) == Path("/srv/mtad/var/pgdata")  # a source tree
    assert config.default_data_dir(None) == Path("var/pgdata")


def test_the_embedded_default_has_a_key_of_its_own_and_a_dsn_none(tmp_path: Path) -> None:
    embedded = config.load(write(tmp_path, '[database]\ndata_dir = "var/pgdata"\n'), environ={}).accounts
    assert (embedded.key_file, embedded.key_env, embedded.make) == (tmp_path / "var" / "accounts.key", None, True)
    basics = config.load_basics(write(tmp_path, '[database]\ndata_dir = "var/pgdata"\n'), environ={}).accounts
    assert basics == embedded
    external = config.load(write(tmp_path, '[database]\ndsn = "postgresql:///x"\n'), environ={}).accounts
    assert (external.key_file, external.key_env, external.make) == (None, None, False)
    named = config.load(write(tmp_path, '[accounts]\nkey_env = "K"\n'), environ={}).accounts
    assert (named.key_file, named.key_env, named.make) == (None, "K", False)


def test_tenant_quotas_and_limits_come_from_their_table_else_from_tenants(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[delivery]
probation_pool = "warm"
[pools.warm]
addresses = ["127.0.0.10"]
[tenants]
max_per_day = 1000
max_complaint_rate = 0.001
probation_default = true
[tenants."shop"]
max_per_hour = 10
max_queued_bytes = "1MiB"
reputation_min_volume = 50
""",
    )
    settings = config.load(path, environ={})
    shop = settings.submission.tenant_defaults["shop"].quota
    assert (shop.max_per_hour, shop.max_per_day, shop.max_queued_bytes) == (10, 1000, 1024 * 1024)
    assert settings.submission.default_quota.max_per_day == 1000
    guard = settings.reputation.guard("shop")
    assert (guard.min_volume, guard.max_complaint_rate, guard.max_bounce_rate) == (50, 0.001, 0.05)
    assert settings.reputation.guard("other").min_volume == 1000
    assert settings.delivery.engine.probation_pool == "warm"
    basics = config.load_basics(path, environ={})
    assert basics.tenants.probation_default is True
    assert basics.tenants.of("shop")[0].max_per_hour == 10


def test_bad_tenant_limits_are_refused_naming_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[delivery]
probation_pool = "nowhere"
[tenants]
max_bounce_rate = 2
probation_default = "yes"
[tenants."shop"]
max_per_hour = 0
max_queued_bytes = "lots"
""",
    )
    with pytest.raises(errors.ConfigError) as info:
        config.load(path, environ={})
    problems = "\n".join(info.value.problems)
    for expected in [
        "[delivery] probation_pool: no pool named 'nowhere'",
        "[tenants] max_bounce_rate: expected a fraction above 0 and at most 1, got 2",
        "[tenants] probation_default: expected true or false",
        '[tenants."shop"] max_per_hour:',
        '[tenants."shop"] max_queued_bytes: expected a size',
    ]:
        assert expected in problems, problems
