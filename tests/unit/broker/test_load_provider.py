"""``load_provider`` builds the configured provider, with its key, importing only its adapter."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from shelldon.broker import load_provider
from shelldon.broker.anthropic_provider import AnthropicProvider
from shelldon.broker.openai_provider import DEFAULT_BASE_URL, OpenAIProvider
from shelldon.broker.provider import Provider
from shelldon.broker.scripted_provider import ScriptedProvider, ScriptError
from shelldon.config import BrainSettings, Settings
from shelldon.secrets import SecretMissingError, forget_env_secrets, is_local_url


@pytest.fixture(autouse=True)
def _no_env_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CREDENTIALS_DIRECTORY"):
        monkeypatch.delenv(var, raising=False)
    forget_env_secrets()


def with_brain(settings: Settings, **brain: object) -> Settings:
    return dataclasses.replace(settings, brain=BrainSettings(**brain))  # type: ignore[arg-type]


def test_default_is_the_scripted_brain_without_a_script(settings: Settings) -> None:
    provider = load_provider(settings)
    assert isinstance(provider, ScriptedProvider)
    assert provider.steps_left == 0


def test_a_relative_script_path_is_read_from_home(settings: Settings) -> None:
    (settings.home / "demo.json").write_text(json.dumps([{"text": "hi"}]))
    provider = load_provider(with_brain(settings, provider="scripted", script="demo.json"))
    assert isinstance(provider, ScriptedProvider) and provider.steps_left == 1


def test_a_missing_script_is_a_clear_error(settings: Settings) -> None:
    with pytest.raises(ScriptError, match=r"brain\.script"):
        load_provider(with_brain(settings, provider="scripted", script="nope.json"))


def test_anthropic_reads_its_key_from_the_vault(settings: Settings) -> None:
    (settings.vault / "anthropic_api_key").write_text("sk-ant-vault-key\n")
    provider = load_provider(
        with_brain(settings, provider="anthropic", model="claude-x", base_url="http://127.0.0.1:9")
    )
    assert isinstance(provider, AnthropicProvider) and isinstance(provider, Provider)
    assert provider._api_key == "sk-ant-vault-key"
    assert provider.base_url == "http://127.0.0.1:9"
    assert "sk-ant-vault-key" not in repr(provider)


def test_anthropic_without_a_key_is_a_start_up_error(settings: Settings) -> None:
    with pytest.raises(SecretMissingError, match="anthropic_api_key"):
        load_provider(with_brain(settings, provider="anthropic"))


def test_openai_defaults_to_openai_and_needs_a_key(settings: Settings) -> None:
    with pytest.raises(SecretMissingError, match="openai_api_key"):
        load_provider(with_brain(settings, provider="openai"))
    (settings.vault / "openai_api_key").write_text("sk-openai")
    provider = load_provider(with_brain(settings, provider="openai"))
    assert isinstance(provider, OpenAIProvider) and isinstance(provider, Provider)
    assert provider.base_url == DEFAULT_BASE_URL
    assert provider._api_key == "sk-openai"


def test_openai_on_a_local_server_needs_no_key(settings: Settings) -> None:
    provider = load_provider(
        with_brain(settings, provider="openai", base_url="http://192.168.1.20:8080/v1")
    )
    assert isinstance(provider, OpenAIProvider)
    assert provider._api_key is None


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://localhost:11434/v1", True),
        ("http://127.0.0.1:8080/v1", True),
        ("http://[::1]:8080/v1", True),
        ("http://10.0.0.5/v1", True),
        ("http://192.168.1.20:8080/v1", True),
        ("http://169.254.1.1/v1", True),
        ("http://gpu-box.local:8080/v1", True),
        ("http://gpu.lan/v1", True),
        ("https://api.openai.com/v1", False),
        ("https://openrouter.ai/api/v1", False),
        ("http://8.8.8.8/v1", False),
        ("http://localhost.evil.com/v1", False),
        ("not a url", False),
    ],
)
def test_local_urls_are_recognized(url: str, local: bool) -> None:
    assert is_local_url(url) is local


@pytest.mark.slow  # a fresh interpreter per case
@pytest.mark.parametrize("provider", ["scripted", "openai"])
def test_the_anthropic_sdk_is_imported_only_for_anthropic(provider: str, home: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys
        from shelldon.config import load_settings
        from shelldon.broker import load_provider
        s = load_settings(environ={{"SHELLDON_HOME": {str(home)!r},
                                    "SHELLDON_BRAIN_PROVIDER": {provider!r},
                                    "SHELLDON_BRAIN_BASE_URL": "http://127.0.0.1:1/v1"}})
        load_provider(s)
        print("anthropic" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"


@pytest.mark.slow  # a fresh interpreter
def test_an_anthropic_fallback_imports_the_sdk_only_when_a_turn_needs_it(home: Path) -> None:
    (home / "vault" / "anthropic_api_key").write_text("sk-ant-spare\n")
    script = textwrap.dedent(
        f"""
        import sys
        from shelldon.config import load_settings
        from shelldon.broker import load_fallback, load_provider
        s = load_settings(environ={{"SHELLDON_HOME": {str(home)!r},
                                    "SHELLDON_BRAIN_PROVIDER": "openai",
                                    "SHELLDON_BRAIN_BASE_URL": "http://127.0.0.1:1/v1",
                                    "SHELLDON_BRAIN_FALLBACK_PROVIDER": "anthropic",
                                    "SHELLDON_BRAIN_FALLBACK_MODEL": "claude-haiku-4-5"}})
        load_provider(s)
        make = load_fallback(s)
        print("anthropic" in sys.modules)
        print(type(make()).__name__, "anthropic" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.split("\n")[:2] == ["False", "AnthropicProvider True"]


def test_a_fallback_reads_its_own_key_name_and_none_is_none(settings: Settings) -> None:
    from shelldon.broker import load_fallback
    from shelldon.config import FallbackSettings

    assert load_fallback(settings) is None
    spare = FallbackSettings("openai", "gpt-4o-mini", "https://openrouter.ai/api/v1", "or_key")
    s = with_brain(settings, provider="anthropic", fallback=spare)
    with pytest.raises(SecretMissingError, match="or_key"):
        load_fallback(s)
    (settings.vault / "or_key").write_text("sk-or-spare\n")
    make = load_fallback(s)
    assert make is not None
    provider = make()
    assert isinstance(provider, OpenAIProvider) and provider._api_key == "sk-or-spare"
    assert provider.base_url == "https://openrouter.ai/api/v1"
