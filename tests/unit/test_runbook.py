"""The runbook cannot drift: every alert of conf/alerts.yml links a section of
docs/operations.md that exists, the page's own links find their sections, and every
`mtad ...` command line the page quotes parses with the command line's parser."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

from mtad import cli

ROOT = Path(__file__).parents[2]
RUNBOOK = ROOT / "docs" / "operations.md"
ALERTS = ROOT / "conf" / "alerts.yml"
FENCED = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.DOTALL | re.MULTILINE)
SPAN = re.compile(r"`([^`]+)`")
RUNBOOK_URL = re.compile(r'^\s+runbook_url: "docs/operations\.md#([\w-]+)"$', re.MULTILINE)
# A command in a block: at the start of a line (after a `$ ` prompt, or the service's
# `sudo -u mtad /opt/mtad/bin/`) or after a pipe.
COMMAND_LINE = re.compile(r"(?:^|\|\s*)(?:\$ )?(?:sudo -u mtad \S+/)?mtad\s")
SEPARATORS = {"|", "||", "&&", ";"}
# What the page writes for a value the reader fills in, and a value that parses.
PLACEHOLDERS = {
    "NAME": "shop", "TENANT": "shop", "T": "shop", "ID": "41", "QUEUE_ID": "41", "TIME": "2h",
    "GROUP": "google", "G": "google", "P": "bulk", "R": "a reason", "H": "imap.example.org",
    "ADDRESS": "ann@example.com", "DOMAIN": "example.org", "SELECTOR": "mtad-202612",
}  # fmt: skip


def alerts() -> dict[str, str | None]:
    """Each alert of conf/alerts.yml and the section its runbook_url names (None: none)."""
    found: dict[str, str | None] = {}
    for rule in re.split(r"^\s+- alert: ", ALERTS.read_text(), flags=re.MULTILINE)[1:]:
        url = RUNBOOK_URL.search(rule)
        found[rule.split()[0]] = url.group(1) if url else None
    return found


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings (a repeated heading's second is `-1`, ...)."""
    found: set[str] = set()
    for line in FENCED.sub("", text).splitlines():
        if heading := re.match(r"#{1,6} (.+)", line):
            name = base = anchor(heading.group(1))
            for n in range(1, 100):
                if name not in found:
                    break
                name = f"{base}-{n}"
            found.add(name)
    return found


def test_every_alert_links_a_section_of_the_runbook() -> None:
    found, sections = alerts(), anchors(RUNBOOK.read_text())
    assert len(found) >= 9  # the split finds the rules
    assert [name for name, url in found.items() if url is None] == [], "alerts without a runbook_url"
    assert {name: url for name, url in found.items() if url not in sections} == {}, "no such section"


def test_the_runbook_links_only_sections_it_has() -> None:
    text = RUNBOOK.read_text()
    linked = set(re.findall(r"\]\(#([\w-]+)\)", text))
    assert linked, "the pattern finds the links"
    assert linked - anchors(text) == set()


def quoted(text: str) -> list[str]:
    """The `mtad ...` command lines of a page: in its blocks, each that starts a line or
    follows a pipe; in its code spans, each span that is one command given arguments (a
    synopsis, with `a|b`, `[...]` or `...`, is not, nor a command only named)."""
    found: list[str] = []
    for block in FENCED.findall(text):
        for line in block.splitlines()[1:-1]:
            line = re.sub(r"^\$ ", "", line.strip())
            if COMMAND_LINE.search(line):
                tokens = shlex.split(line, comments=True)
                found += [" ".join(shlex.quote(t) for t in part) for part in _commands(tokens)]
    for span in SPAN.findall(FENCED.sub("", text)):
        span = " ".join(span.split())
        if not span.startswith("mtad "):
            continue
        tokens = shlex.split(span)
        if any("|" in t or "[" in t or "..." in t for t in tokens):
            continue
        found += [" ".join(shlex.quote(t) for t in part) for part in _commands(tokens) if not _named(part)]
    return found


def _named(args: list[str]) -> bool:
    """Whether the arguments are only a command's name (`webhooks test`), which prose
    writes to name the command; the docs tests check that it exists."""
    parser = cli.parser()
    for word in args:
        below = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not below or word not in below[0].choices:
            return False
        parser = below[0].choices[word]
    return bool(args)


def _commands(tokens: list[str]) -> list[list[str]]:
    """The arguments of each mtad command among a shell line's tokens, redirections left out."""
    parts: list[list[str]] = [[]]
    for token in tokens:
        if token in SEPARATORS:
            parts.append([])
        else:
            parts[-1].append(token)
    found: list[list[str]] = []
    for part in parts:
        if part[:3] == ["sudo", "-u", "mtad"]:
            part = part[3:]
        if not part or Path(part[0]).name != "mtad":
            continue
        args: list[str] = []
        skip = False
        for token in part[1:]:
            if skip:
                skip = False
            elif token in ("<", ">", ">>", "2>"):
                skip = True
            elif not re.match(r"^\d?[<>]", token):
                args.append(token)
        found.append(args)
    return found


def strict(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The parser, and every one below it, taking an option only by its whole name
    (mtad's users may abbreviate; the runbook spells them out)."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for below in action.choices.values():
                strict(below)
    return parser


def test_the_pattern_finds_the_command_lines() -> None:
    text = "```sh\n$ mtad queue ls --state deferred | head  # why\nmtad accounts key > /etc/k\n```\n"
    text += "`mtad tenants pause|resume` and `mtad tenants show\n  NAME --json`, `mtad webhooks test`, `mtad_spool`"
    assert quoted(text) == ["queue ls --state deferred", "accounts key", "tenants show NAME --json"]
    assert len(quoted(RUNBOOK.read_text())) > 60


def test_every_command_line_of_the_runbook_parses() -> None:
    unknown: set[str] = set()
    refused: list[str] = []
    for line in quoted(RUNBOOK.read_text()):
        args: list[str] = []
        for token in shlex.split(line):
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", token):
                if token not in PLACEHOLDERS:
                    unknown.add(token)
                token = PLACEHOLDERS.get(token, token)
            args.append(token)
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said), contextlib.redirect_stdout(said):
                strict(cli.parser()).parse_args(args)
        except SystemExit:
            refused.append(f"mtad {line}: {said.getvalue().strip().splitlines()[-1]}")
    assert unknown == set(), "placeholders to give a value in PLACEHOLDERS"
    assert refused == []
