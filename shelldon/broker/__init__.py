"""The provider seam: holds credentials, normalizes tool calls, executes nothing.

``load_provider(settings)`` builds the configured ``Provider``. Each adapter module is imported
only when it is the one configured, so ``import anthropic`` (~70 MB) happens only for
``provider = "anthropic"``.

Credentials: ``anthropic_api_key`` / ``openai_api_key`` come from ``shelldon.secrets``. For
``provider = "openai"`` the key may be missing only when ``base_url`` points at this machine or
the local network (``localhost``, loopback, private or link-local addresses, ``*.local``,
``*.lan``, ``*.internal``, ``*.home.arpa``): llama.cpp's server and Ollama need none, and a key
is then not sent at all. A public endpoint without a key is a start-up error
(``SecretMissingError``), never a request that goes out unauthenticated.

A relative ``brain.script`` path is resolved against the shelldon home.

``load_fallback(settings)`` reads ``[brain.fallback]``'s key at once (a missing one is the same
start-up error) but builds its provider only when a turn first needs it (``fallback.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from shelldon.broker.provider import Provider, ProviderError
from shelldon.config import Settings
from shelldon.secrets import fallback_key, find_secret, is_local_url, read_secret

__all__ = ["Provider", "ProviderError", "is_local_url", "load_fallback", "load_provider"]


def load_provider(settings: Settings) -> Provider:
    """The ``Provider`` that ``settings.brain`` configures, with its credentials loaded.

    Raises ``SecretMissingError`` when the provider's key is missing (see module docstring) and
    ``ScriptError`` when the scripted brain's script is unusable."""
    brain = settings.brain
    if brain.provider in ("anthropic", "openai"):
        key = f"{brain.provider}_api_key"
        api_key = _key(key, brain.provider, brain.base_url, settings)
        return _adapter(brain.provider, brain.model, brain.base_url, api_key, settings)
    from shelldon.broker.scripted_provider import ScriptedProvider

    if not brain.script:
        return ScriptedProvider()
    script = Path(brain.script).expanduser()
    return ScriptedProvider.from_file(script if script.is_absolute() else settings.home / script)


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
            api_key=api_key,
            model=model,
            max_tokens=max_tokens,
            base_url=base_url,
        )
    from shelldon.broker.openai_provider import DEFAULT_BASE_URL, OpenAIProvider

    return OpenAIProvider(
        api_key=api_key,
        model=model,
        max_tokens=max_tokens,
        base_url=base_url or DEFAULT_BASE_URL,
    )
