"""The layer rules of pyproject.toml's import-linter contracts hold (docs/architecture.md):
each package imports only the layers below it, and none imports config, daemon or cli."""

import ast
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


MAX_MODULE_LINES = 600  # a module is one idea a reader can hold
MAX_CLASS_LINES = 400


def test_no_module_or_class_outgrows_one_head() -> None:
    too_big = []
    for path in sorted((ROOT / "mtad").rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(ROOT)
        if (lines := source.count("\n")) > MAX_MODULE_LINES:
            too_big.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef) and (lines := node.end_lineno - node.lineno + 1) > MAX_CLASS_LINES:
                too_big.append(f"{name}: class {node.name} of {lines} lines")
    assert not too_big, "split these: " + "; ".join(too_big)
