"""The command line imports what a command needs when it runs: `mtad --help` no domain
module, a tool such as `mtad queue ls` none of the delivery or submission code, and
the whole configuration (`mtad check-config`) none of the libraries that do I/O."""

import subprocess
import sys
from pathlib import Path

from mtad.base import events
from mtad.cli import accounts as accounts_cli
from mtad.cli import common, suppress
from mtad.cli import dkim as dkim_cli
from mtad.cli import queue as queue_cli
from mtad.feedback import suppression
from mtad.mailboxes import accounts
from mtad.signing import dkim
from mtad.spool import actions, queue

HEAVY = (
    "mtad.deliver",
    "mtad.submission",
    "mtad.outbound.sessions",
    "mtad.mailboxes",
    "mtad.signing",
    "aiosmtplib",
    "aiosmtpd",
    "rich",  # structlog imports it when it is installed: 0.1 s (import-linter needs it: .venv-tools)
)


def loaded_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after running `code`."""
    script = f"import sys\n{code}\nprint('\\n'.join(sys.modules))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    return set(done.stdout.split())


def test_help_imports_no_domain_module() -> None:
    loaded = loaded_after("from mtad import cli\ntry:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass")
    assert not {m for m in loaded if m.startswith("mtad.") and not m.startswith("mtad.cli.")} - {
        "mtad.cli",
        "mtad.base",
        "mtad.base.errors",
        "mtad.base.lifecycle",
    }
    assert "asyncpg" not in loaded


def test_a_tools_configuration_imports_no_delivery_code(tmp_path: Path) -> None:
    path = tmp_path / "mtad.toml"
    path.write_text('[database]\ndata_dir = "pgdata"\n[delivery]\nlease_duration = "1m"\n')
    code = "from pathlib import Path\nfrom mtad import config\nfrom mtad.spool import queue\n"
    code += f"config.load_basics(Path({str(path)!r}))"
    loaded = loaded_after(code)
    # Of a heavy package, only its declarations (the sections it owns) and the limits of
    # [tenants]: no code of it.
    declarations = {f"{package}.{name}" for package in HEAVY for name in ("settings", "tenant_tables")}
    heavy = {m for m in loaded for h in HEAVY if m == h or m.startswith(h + ".")} - set(HEAVY) - declarations
    assert not heavy
    assert not loaded & {"aiosmtpd", "aiosmtplib", "rich", "asyncpg", "prometheus_client"}


# The libraries that do I/O (or cost tens of milliseconds to import) that parsing the
# configuration has no use for.
IO_LIBRARIES = {"asyncpg", "aiohttp", "aiosmtplib", "aiosmtpd", "dns", "prometheus_client", "cryptography",
                "structlog", "flufl.bounce", "standardwebhooks", "nacl", "dkim", "rich"}  # fmt: skip


def test_the_whole_configuration_imports_no_io_library() -> None:
    reference = Path(__file__).parents[2] / "conf" / "mtad.toml"
    loaded = loaded_after(f"from pathlib import Path\nfrom mtad import config\nconfig.load(Path({str(reference)!r}))")
    assert not loaded & IO_LIBRARIES


def test_the_event_log_and_the_queue_listing_load_no_metrics() -> None:
    loaded = loaded_after("from mtad.feedback import tail\nfrom mtad.admin import filters, views")
    assert not loaded & {"prometheus_client", "flufl.bounce", "aiohttp"}


def test_the_parsers_choices_are_the_enums() -> None:
    assert tuple(a.value for a in dkim.Algorithm) == dkim_cli.ALGORITHMS
    assert tuple(t.value for t in accounts.Tls) == accounts_cli.TLS_MODES
    assert tuple(m.value for m in accounts.Mechanism) == accounts_cli.MECHANISMS
    assert tuple(r.value for r in suppression.Reason) == suppress.REASONS
    assert tuple(k.value for k in events.Kind) == common.EVENT_KINDS
    assert queue.BY == queue_cli.BY_CHOICES
    assert queue.BUCKETS == queue_cli.BUCKETS
    assert {name: tuple(actions.sources(name, queue.Filters(states=None))) for name in actions.ACTIONS} == (
        queue_cli.ACTION_STATES
    )
