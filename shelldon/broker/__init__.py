"""The provider seam: holds credentials, normalizes tool calls, executes nothing.

``load_provider(settings)`` builds the configured ``Provider``, importing its adapter only
then, so ``import anthropic`` (~70 MB) happens only for ``provider = "anthropic"``.
``load_fallback`` reads ``[brain.fallback]``'s key at once but builds its provider only when a
turn first needs it (``fallback.py``).

Keys come from ``shelldon.secrets``. An OpenAI-compatible ``base_url`` on this machine or the
local network (``secrets.is_local_url``) may have none: llama.cpp's server and Ollama need
none, and none is then sent. A public endpoint without a key, main or fallback, is a start-up
error (``SecretMissingError``), never a request that goes out unauthenticated.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shelldon.broker.provider import Provider, ProviderError
from shelldon.config import Settings
from shelldon.secrets import fallback_key, find_secret, is_local_url, read_secret

__all__ = ["Provider", "ProviderError", "is_local_url", "load_fallback", "load_provider"]


def load_provider(settings: Settings) -> Provider:
    """The ``Provider`` that ``settings.brain`` configures, with its key loaded; raises
    ``SecretMissingError`` for a missing key, ``ScriptError`` for an unusable script."""
    brain = settings.brain
    if brain.provider in ("anthropic", "openai"):
        api_key = _key(f"{brain.provider}_api_key", brain.provider, brain.base_url, settings)
        return _adapter(brain.provider, brain.model, brain.base_url, api_key, settings)
    from shelldon.broker.scripted_provider import ScriptedProvider, load_script

    if not brain.script:
        return ScriptedProvider()
    script = Path(brain.script).expanduser()
    return ScriptedProvider(load_script(script if script.is_absolute() else settings.home / script))


def load_fallback(settings: Settings) -> Callable[[], Provider] | None:
    """What builds ``[brain.fallback]``'s provider at its first use, or None when there is
    none; its key is read now. Raises ``SecretMissingError`` as ``load_provider`` does."""
    fb = settings.brain.fallback
    needed = fallback_key(settings.brain)
    if needed is None:
        return None
    api_key = _key(needed[0], fb.provider, fb.base_url, settings)
    return lambda: _adapter(fb.provider, fb.model, fb.base_url, api_key, settings)


def _key(name: str, provider: str, base_url: str, settings: Settings) -> str | None:
    """Secret ``name``; optional only for an OpenAI-compatible server on this machine or LAN."""
    if provider == "openai" and is_local_url(base_url):  # "" is api.openai.com: not local
        found = find_secret(name, settings.vault)
        return found[0] if found else None
    return read_secret(name, settings.vault)


def _adapter(
    provider: str, model: str, base_url: str, api_key: str | None, settings: Settings
) -> Provider:
    """The adapter for ``provider``; its module (and SDK) is imported here, not before."""
    max_tokens = settings.brain.max_tokens
    if provider == "anthropic":
        from shelldon.broker.anthropic_provider import AnthropicProvider

        assert api_key is not None
        return AnthropicProvider(
            api_key=api_key, model=model, max_tokens=max_tokens, base_url=base_url
        )
    from shelldon.broker.openai_provider import OpenAIProvider

    return OpenAIProvider(api_key=api_key, model=model, max_tokens=max_tokens, base_url=base_url)
