"""The layer rules of pyproject.toml's import-linter contracts hold (docs/architecture.md):
each package imports only the layers below it, and none imports config, daemon or cli."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]
LINTER = ROOT / ".venv-tools" / "bin" / "lint-imports"  # installed by `make test` (see the Makefile)


def test_the_import_contracts_are_kept() -> None:
    assert LINTER.exists(), f"{LINTER} is missing: `make test` installs it"
    done = subprocess.run([str(LINTER), "--config", str(ROOT / "pyproject.toml"), "--no-cache"], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout
