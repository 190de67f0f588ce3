"""The command line's parser: each group's commands register on their own and together,
every command answers --help, and main() loads what a command says it needs."""

from __future__ import annotations

import argparse
from types import ModuleType

import pytest

from mtad import cli
from mtad.cli import common


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(found[0].choices) if found else {}


def paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand below `parser`, as the words that name it."""
    found = []
    for name, sub in subcommands(parser).items():
        found.append((*path, name))
        found += paths(sub, (*path, name))
    return found


def leaves(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    below = subcommands(parser)
    return [leaf for sub in below.values() for leaf in leaves(sub)] if below else [parser]


TOP = subcommands(cli.parser())
EVERY = paths(cli.parser())


def test_the_top_level_commands() -> None:
    assert list(TOP) == [
        "run", "migrate", "check-config", "reload", "sendmail", "sink", "blast", "suspend", "resume", "suspensions",
        "tenants", "campaigns", "tls", "reputation", "queue", "suppress", "webhooks", "events", "bounces", "dkim",
        "buckets", "accounts",
    ]  # fmt: skip


@pytest.mark.parametrize("group", cli.GROUPS, ids=lambda group: group.__name__.rsplit(".", 1)[-1])
def test_each_group_registers_its_commands_on_its_own(group: ModuleType) -> None:
    top = argparse.ArgumentParser(prog="mtad")
    group.register(common.Commands(top.add_subparsers(), common.config_option()))
    assert tuple(subcommands(top)) == cli.GROUPS[group]  # what main() builds for one of them
    commands = leaves(top)
    assert commands != [top]
    for parser in commands:
        assert isinstance(parser.get_default("command"), common.Command), parser.prog
        assert parser.get_default("command").run.__module__ == group.__name__, parser.prog


@pytest.mark.parametrize(
    ("given", "built"),
    [
        (["reload", "--wait", "5"], ("run", "migrate", "check-config", "reload")),
        (["--config", "queue", "events", "tail"], ("events",)),  # --config's value is not the command
        (["--config=x.toml", "queue", "ls"], ("queue",)),
        (["--version"], tuple(TOP)),
        (["nosuch"], tuple(TOP)),  # refused with every command named
    ],
)
def test_main_builds_the_parser_of_the_command_given(given: list[str], built: tuple[str, ...]) -> None:
    assert tuple(subcommands(cli.parser(cli._command(given)))) == built


@pytest.mark.parametrize("path", EVERY, ids=" ".join)
def test_every_command_answers_help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([*path, "--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: mtad {' '.join(path)} ")


@pytest.mark.parametrize("group", [name for name, sub in TOP.items() if subcommands(sub)])
def test_a_group_without_its_command_is_bad_usage(group: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([group])
    assert exited.value.code == common.EXIT_USAGE
    assert "the following arguments are required" in capsys.readouterr().err


def test_no_command_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == common.EXIT_USAGE
    assert capsys.readouterr().out.startswith("usage: mtad ")


def test_a_command_loads_the_whole_configuration_when_it_says_so() -> None:
    def run(args: argparse.Namespace) -> int:
        return 0

    none = argparse.Namespace(provider=None, pool=None, source=None)
    assert not common.Command(run).whole(none)
    assert common.Command(run, common.Config.WHOLE).whole(none)
    assert common.Command(run, common.Config.OPTIONAL).whole(none)
    assert not common.Command(run, names=True).whole(none)
    assert common.Command(run, names=True).whole(argparse.Namespace(provider="google", pool=None))
    assert not common.Command(run).whole(argparse.Namespace(provider="google"))


def test_a_command_without_configuration_runs_without_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["accounts", "key"]) == common.EXIT_OK
    assert len(capsys.readouterr().out.strip()) == 44  # a Fernet key
