"""The tests' shared code stays shared: fixtures live in a conftest.py (pytest finds
them there), helpers in modules of tests/ that are not tests, and no module imports a
test module or a conftest.py. Importing a test module runs its tests twice and ties
one test file to another's internals; importing a conftest.py loads it a second time
under another name."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).parents[2]
SEARCHED = ("tests", "bench")


def _forbidden_imports(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """(line, module) of each import statement in the tree (function-level ones
    included) that names a test module or a conftest.py of tests/; `from tests.x
    import y` names tests.x and tests.x.y (y may be a module)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            named = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        if forbidden := [module for module in named if _forbidden(module)]:
            yield node.lineno, forbidden[0]


def _forbidden(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tests" and any(part.startswith("test_") or part == "conftest" for part in parts[1:])


def test_no_module_imports_a_test_module_or_a_conftest() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for top in SEARCHED
        for path in sorted((ROOT / top).rglob("*.py"))
        for line, module in _forbidden_imports(ast.parse(path.read_text(), str(path)))
    ]
    assert found == [], "move what is shared into a conftest.py (fixtures) or a helper module:\n" + "\n".join(found)


def test_the_check_sees_the_imports_it_forbids() -> None:
    tree = ast.parse(
        "from tests.acceptance.test_run import email\n"
        "from tests.acceptance import test_run\n"
        "import tests.conftest\n"
        "def late():\n    from tests.integration.conftest import x\n"
        "from tests.integration import delivering\n"
        "from tests.running import Mtad\n"
    )
    assert [line for line, _ in _forbidden_imports(tree)] == [1, 2, 3, 5]
