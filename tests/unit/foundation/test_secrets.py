"""Secrets: credentials dir, then vault, then environment (scrubbed at once); never printed."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelldon.secrets import (
    SecretMissingError,
    find_secret,
    forget_env_secrets,
    read_secret,
    take_env_secrets,
)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    forget_env_secrets()
    yield
    forget_env_secrets()


def test_credentials_directory_wins(tmp_path: Path) -> None:
    creds, vault = tmp_path / "creds", tmp_path / "vault"
    creds.mkdir()
    vault.mkdir()
    (creds / "anthropic_api_key").write_text("from-creds\n")
    (vault / "anthropic_api_key").write_text("from-vault\n")
    env = {"CREDENTIALS_DIRECTORY": str(creds), "ANTHROPIC_API_KEY": "from-env"}
    assert read_secret("anthropic_api_key", vault, env) == "from-creds"


def test_vault_file_is_stripped_of_echo_newline(tmp_path: Path) -> None:
    (tmp_path / "telegram_token").write_text("  123:abc \n")
    assert read_secret("telegram_token", tmp_path, {}) == "123:abc"


def test_environment_secret_is_removed_from_the_environment_when_read(tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": "sk-env", "OTHER": "1"}
    assert read_secret("openai_api_key", tmp_path, env) == "sk-env"
    assert "OPENAI_API_KEY" not in env
    assert env == {"OTHER": "1"}


def test_take_env_secrets_scrubs_every_secret_variable() -> None:
    env = {"TELEGRAM_BOT_TOKEN": "t", "ANTHROPIC_API_KEY": "a", "OPENAI_API_KEY": "o", "PATH": "/"}
    take_env_secrets(env)
    assert env == {"PATH": "/"}


def test_missing_secret_says_where_to_put_it(tmp_path: Path) -> None:
    with pytest.raises(SecretMissingError) as err:
        read_secret("telegram_token", tmp_path, {})
    msg = str(err.value)
    assert str(tmp_path / "telegram_token") in msg
    assert "TELEGRAM_BOT_TOKEN" in msg
    assert "LoadCredential" in msg


def test_empty_secret_file_counts_as_missing(tmp_path: Path) -> None:
    (tmp_path / "telegram_token").write_text("\n")
    assert find_secret("telegram_token", tmp_path, {}) is None


def test_where_never_contains_the_value(tmp_path: Path) -> None:
    (tmp_path / "telegram_token").write_text("SECRETVALUE")
    value, where = find_secret("telegram_token", tmp_path, {}) or ("", "")
    assert value == "SECRETVALUE"
    assert "SECRETVALUE" not in where


def test_doctor_reports_secrets_found_without_printing_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "vault").mkdir(parents=True)
    (home / "vault" / "telegram_token").write_text("123456:TOPSECRET-TOKEN\n")
    env = {
        "SHELLDON_HOME": str(home),
        "PATH": os.environ["PATH"],
        "ANTHROPIC_API_KEY": "sk-ant-ENVSECRET",
        "SHELLDON_BRAIN_PROVIDER": "anthropic",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    out = proc.stdout + proc.stderr
    assert "TOPSECRET" not in out
    assert "ENVSECRET" not in out
    assert "secret telegram_token" in out
    assert "found in" in out
    assert proc.returncode == 0, out


def test_doctor_fails_when_the_provider_key_is_missing(tmp_path: Path) -> None:
    env = {
        "SHELLDON_HOME": str(tmp_path),
        "PATH": os.environ["PATH"],
        "SHELLDON_BRAIN_PROVIDER": "openai",
    }
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "doctor"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "openai_api_key" in proc.stdout
    assert "needed by the configured provider" in proc.stdout
