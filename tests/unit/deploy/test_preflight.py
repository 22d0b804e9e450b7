"""What `shelldon run` / `chat` refuse before any actor starts (exit 78) and what they only warn
about; the words are the ones `shelldon doctor` uses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shelldon.config import Settings, load_settings
from shelldon.preflight import BOT_TOKEN_SHAPE, preflight
from shelldon.secrets import forget_env_secrets

GOOD_TOKEN = "123456789:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"


@pytest.fixture(autouse=True)
def no_secrets_taken_from_the_environment() -> Iterator[None]:
    forget_env_secrets()  # secrets taken from an environment are kept process-wide
    yield
    forget_env_secrets()


def settings_for(home: Path, **env: str) -> Settings:
    return load_settings(environ={"SHELLDON_HOME": str(home), **env})


def with_token(home: Path, token: str = GOOD_TOKEN) -> None:
    (home / "vault" / "telegram_token").write_text(token + "\n")


def test_a_configured_telegram_service_starts_without_a_word(home: Path) -> None:
    with_token(home)
    found = preflight(settings_for(home, SHELLDON_TELEGRAM_ALLOWED_USERS="1001"), "telegram", {})
    assert found.refusals == () and found.warnings == ()


def test_no_bot_token_is_refused_with_where_to_put_it(home: Path) -> None:
    found = preflight(settings_for(home, SHELLDON_TELEGRAM_ALLOWED_USERS="1"), "telegram", {})
    assert len(found.refusals) == 1
    assert found.refusals[0].startswith("no bot token configured: put the token from @BotFather")
    assert "--credential telegram_token" in found.refusals[0]


def test_an_empty_token_file_is_no_token(home: Path) -> None:
    with_token(home, "")  # what install.sh leaves until the owner stores one
    found = preflight(settings_for(home, SHELLDON_TELEGRAM_ALLOWED_USERS="1"), "telegram", {})
    assert found.refusals[0].startswith("no bot token configured")


@pytest.mark.parametrize(
    "token", ["my-bot-password-1234", "123456:short", "abc:AAHfiqksKZ8WmR2zSjiQ7_v4TMAKdiHm9T0"]
)
def test_a_malformed_token_is_refused_without_showing_it(home: Path, token: str) -> None:
    with_token(home, token)
    found = preflight(settings_for(home, SHELLDON_TELEGRAM_ALLOWED_USERS="1"), "telegram", {})
    assert len(found.refusals) == 1
    assert "does not look like one from @BotFather" in found.refusals[0]
    assert token not in found.refusals[0]


def test_empty_allowed_users_is_a_warning_not_a_refusal(home: Path) -> None:
    with_token(home)
    found = preflight(settings_for(home), "telegram", {})
    assert found.refusals == ()
    assert found.warnings == (
        "telegram.allowed_users is empty: nobody can talk to the pet until it is "
        "paired; send the bot a message in Telegram, then run the command it answers "
        "with (sudo shelldon pair CODE) on this machine",
    )


def test_the_console_needs_no_token(home: Path) -> None:
    assert preflight(settings_for(home), "console", {}).refusals == ()


def test_a_missing_anthropic_key_says_no_api_key_configured(home: Path) -> None:
    found = preflight(settings_for(home, SHELLDON_BRAIN_PROVIDER="anthropic"), "console", {})
    assert len(found.refusals) == 1
    assert found.refusals[0].startswith(
        "no API key configured: provider 'anthropic' needs anthropic_api_key"
    )
    assert "credentials" not in found.refusals[0].split(";")[0]


@pytest.mark.parametrize(
    "base_url",
    [
        "http://127.0.0.1:8080/v1",
        "http://localhost:11434/v1",
        "http://192.168.1.20:8080/v1",
        "http://10.0.0.5:11434/v1",
        "http://llama.lan:8080/v1",
        "http://gpu-box.local:8080/v1",
    ],
)
def test_a_keyless_openai_compatible_server_here_or_on_the_lan_is_fine(
    home: Path, base_url: str
) -> None:
    env = {"SHELLDON_BRAIN_PROVIDER": "openai", "SHELLDON_BRAIN_BASE_URL": base_url}
    assert preflight(settings_for(home, **env), "console", {}).refusals == ()


@pytest.mark.parametrize("base_url", ["", "https://api.openai.com/v1", "https://openrouter.ai/v1"])
def test_a_keyless_public_openai_endpoint_is_refused(home: Path, base_url: str) -> None:
    env = {"SHELLDON_BRAIN_PROVIDER": "openai", "SHELLDON_BRAIN_BASE_URL": base_url}
    found = preflight(settings_for(home, **env), "console", {})
    assert found.refusals and found.refusals[0].startswith(
        "no API key configured: provider 'openai' needs openai_api_key"
    )


def test_a_key_from_the_environment_counts(home: Path) -> None:
    found = preflight(
        settings_for(home, SHELLDON_BRAIN_PROVIDER="anthropic"),
        "console",
        {"ANTHROPIC_API_KEY": "sk-ant-test"},
    )
    assert found.refusals == ()


def test_token_shape() -> None:
    assert BOT_TOKEN_SHAPE.match(GOOD_TOKEN)
    assert not BOT_TOKEN_SHAPE.match(GOOD_TOKEN + "\n/../x")
    assert not BOT_TOKEN_SHAPE.match("")


def test_a_fallback_without_its_key_is_refused_naming_it(home: Path) -> None:
    with_token(home)
    (home / "vault" / "anthropic_api_key").write_text("sk-ant-main\n")
    env = {
        "SHELLDON_TELEGRAM_ALLOWED_USERS": "1",
        "SHELLDON_BRAIN_PROVIDER": "anthropic",
        "SHELLDON_BRAIN_FALLBACK_PROVIDER": "openai",
        "SHELLDON_BRAIN_FALLBACK_MODEL": "gpt-4o-mini",
        "SHELLDON_BRAIN_FALLBACK_KEY": "openrouter_api_key",
    }
    found = preflight(settings_for(home, **env), "telegram", {})
    (refusal,) = found.refusals
    assert "fallback 'openai' needs openrouter_api_key" in refusal
    assert str(home / "vault" / "openrouter_api_key") in refusal
    (home / "vault" / "openrouter_api_key").write_text("sk-or-spare\n")
    assert preflight(settings_for(home, **env), "telegram", {}).refusals == ()
