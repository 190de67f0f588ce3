"""Secrets at rest: sealed with a key that is not in the database, never shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from mtad.base import errors, vault


def test_a_sealed_secret_opens_with_its_key_only() -> None:
    key = vault.Vault.new_key()
    sealed = vault.Vault(key).seal(vault.Secret("hunter2"))
    assert b"hunter2" not in sealed
    assert vault.Vault(key).open(sealed).reveal() == "hunter2"
    with pytest.raises(errors.ConfigError, match="does not open with this key"):
        vault.Vault(vault.Vault.new_key()).open(sealed)


def test_a_secret_never_shows_itself() -> None:
    secret = vault.Secret("hunter2")
    assert "hunter2" not in repr(secret)
    assert "hunter2" not in str(secret)
    assert "hunter2" not in f"{secret} {[secret]} { ({'s': secret}) }"


def test_the_key_comes_from_a_file_or_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = vault.Vault.new_key()
    (tmp_path / "key").write_bytes(key + b"\n")
    sealed = vault.Vault.from_config(tmp_path / "key", None).seal(vault.Secret("s"))
    monkeypatch.setenv("MTAD_TEST_ACCOUNTS_KEY", key.decode())
    assert vault.Vault.from_config(None, "MTAD_TEST_ACCOUNTS_KEY").open(sealed).reveal() == "s"


@pytest.mark.parametrize(
    ("key_file", "key_env", "problem"),
    [
        ("missing", None, "[accounts] key_file: cannot read"),
        (None, "MTAD_TEST_UNSET_KEY", "[accounts] key_env: the environment variable MTAD_TEST_UNSET_KEY is not set"),
        (None, None, "[accounts] key_file or key_env: account secrets, DKIM keys and webhook secrets are sealed"),
        ("bad", None, "[accounts] key: expected 32 bytes in URL-safe base64"),
    ],
)
def test_a_missing_or_bad_key_is_a_config_error_naming_the_key(
    tmp_path: Path, key_file: str | None, key_env: str | None, problem: str
) -> None:
    (tmp_path / "bad").write_text("not a key")
    with pytest.raises(errors.ConfigError) as info:
        vault.Vault.from_config(tmp_path / key_file if key_file else None, key_env)
    assert info.value.problems[0].startswith(problem)


def test_make_key_writes_one_key_readable_by_its_owner_alone(tmp_path: Path) -> None:
    path = tmp_path / "state" / "accounts.key"
    assert vault.make_key(path)
    assert path.stat().st_mode & 0o777 == 0o600
    made = path.read_bytes()
    assert not vault.make_key(path)  # kept as it is
    assert path.read_bytes() == made
    assert vault.Vault.from_config(path, None).open(vault.Vault(made.strip()).seal(vault.Secret("s"))).reveal() == "s"
    assert [p.name for p in path.parent.iterdir()] == ["accounts.key"]  # no draft left behind
