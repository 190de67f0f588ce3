"""The runbook names only commands the command line has."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from mtad import cli

RUNBOOK = Path(__file__).parents[2] / "docs" / "operations.md"
CODE = re.compile(r"```.*?```|`[^`]+`", re.DOTALL)  # fenced blocks, and spans (over a line break too)
COMMAND = re.compile(r"(?<![-\w])mtad +([a-z][\w-]*)(?: +([a-z][\w-]*(?:\|[a-z][\w-]*)*))?(?=[\s`]|$)", re.MULTILINE)


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def test_every_command_the_runbook_names_exists() -> None:
    top = commands(cli._parser())
    spans = [s if s.startswith("```") else " ".join(s.split()) for s in CODE.findall(RUNBOOK.read_text())]
    named = [m.groups() for span in spans for m in COMMAND.finditer(span)]
    assert len(named) > 20  # the pattern finds them
    for command, sub in named:
        assert command in top, command
        below = commands(top[command])
        if below:
            assert sub is not None, command
            for choice in sub.split("|"):
                assert choice in below, f"mtad {command} {choice}"
