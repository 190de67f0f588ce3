"""The docs name only commands the command line has, and docs/configuration.md lists
every section and key of conf/mtad.toml with the default the file gives it."""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from mtad import cli

ROOT = Path(__file__).parents[2]
RUNBOOK = ROOT / "docs" / "operations.md"
# architecture.md is left out: its blocks say what modules do, in prose that names mtad.
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "architecture.md")]
CONFIGURATION = ROOT / "docs" / "configuration.md"
CONF = ROOT / "conf" / "mtad.toml"
CODE = re.compile(r"```.*?```|`[^`]+`", re.DOTALL)  # fenced blocks, and spans (over a line break too)
COMMAND = re.compile(r"(?<![-\w])mtad +([a-z][\w-]*)(?: +([a-z][\w-]*(?:\|[a-z][\w-]*)*))?(?=[\s`]|$)", re.MULTILINE)


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def named_commands(page: Path) -> list[tuple[str, str | None]]:
    """The `mtad COMMAND [SUB]` a page names in its code, spans and blocks."""
    spans = [s if s.startswith("```") else " ".join(s.split()) for s in CODE.findall(page.read_text())]
    return [m.groups() for span in spans for m in COMMAND.finditer(span)]


def test_the_runbook_and_the_command_page_name_commands() -> None:
    assert len(named_commands(RUNBOOK)) > 20  # the pattern finds them
    assert len(named_commands(ROOT / "docs" / "cli.md")) > 40


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_command_a_page_names_exists(page: Path) -> None:
    top = commands(cli.parser())
    for command, sub in named_commands(page):
        assert command in top, command
        below = commands(top[command])
        if below:
            assert sub is not None, command
            for choice in sub.split("|"):
                assert choice in below, f"mtad {command} {choice}"


def documented() -> dict[str, dict[str, str]]:
    """docs/configuration.md's tables: `### [section]` -> key -> its default as written."""
    found: dict[str, dict[str, str]] = {}
    for part in re.split(r"^### ", CONFIGURATION.read_text(), flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        rows = re.findall(r"^\| `(\w+)` \| ([^|]*?) \|", body, re.MULTILINE)
        found[heading.strip()] = dict(rows)
    return found


def as_toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(as_toml(v) for v in value) + "]"
    return str(value)


def test_the_configuration_page_gives_every_key_of_the_reference_file_its_default() -> None:
    tables = documented()
    reference = tomllib.loads(CONF.read_text())
    for section, keys in reference.items():
        if section == "routes":  # [routes."sink.test"]: the quick start's route, an example
            continue
        assert f"[{section}]" in tables, section
        for key, value in keys.items():
            assert key in tables[f"[{section}]"], f"[{section}] {key}"
            assert tables[f"[{section}]"][key] == f"`{as_toml(value)}`", f"[{section}] {key}"


# The tables of conf/mtad.toml that are examples in comments, as the page names them.
EXAMPLES = {"tenants": '[tenants."NAME"]', "routes": '[routes."DOMAIN"]', "pools": "[pools.NAME]",
            "account_pools": "[account_pools.NAME]"}  # fmt: skip


def test_the_configuration_page_lists_every_key_the_reference_file_shows_in_comments() -> None:
    tables = documented()
    section, shown = "", 0
    for line in CONF.read_text().splitlines():
        if heading := re.match(r'^(?:# )?\[(\w+)(\."[^"]+"|\.\w+)?\]$', line):
            name, named = heading.groups()
            section = EXAMPLES[name] if named else f"[{name}]"
        elif key := re.match(r"^# (\w+) = ", line):
            assert key.group(1) in tables[section], f"{section} {key.group(1)}"
            shown += 1
    assert shown > 40  # the pattern finds them
