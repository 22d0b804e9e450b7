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
"""

from __future__ import annotations

from pathlib import Path

from shelldon.broker.provider import Provider, ProviderError
from shelldon.config import Settings
from shelldon.secrets import find_secret, is_local_url, read_secret

__all__ = ["Provider", "ProviderError", "is_local_url", "load_provider"]


def load_provider(settings: Settings) -> Provider:
    """The ``Provider`` that ``settings.brain`` configures, with its credentials loaded.

    Raises ``SecretMissingError`` when the provider's key is missing (see module docstring) and
    ``ScriptError`` when the scripted brain's script is unusable."""
    brain = settings.brain
    timeout_s = settings.limits.turn_timeout_s
    if brain.provider == "anthropic":
        from shelldon.broker.anthropic_provider import AnthropicProvider

        return AnthropicProvider(
            api_key=read_secret("anthropic_api_key", settings.vault),
            model=brain.model,
            max_tokens=brain.max_tokens,
            base_url=brain.base_url,
            default_timeout_s=timeout_s,
        )
    if brain.provider == "openai":
        from shelldon.broker.openai_provider import DEFAULT_BASE_URL, OpenAIProvider

        base_url = brain.base_url or DEFAULT_BASE_URL
        if is_local_url(base_url):
            found = find_secret("openai_api_key", settings.vault)
            api_key = found[0] if found else None
        else:
            api_key = read_secret("openai_api_key", settings.vault)
        return OpenAIProvider(
            api_key=api_key,
            model=brain.model,
            max_tokens=brain.max_tokens,
            base_url=base_url,
            default_timeout_s=timeout_s,
        )
    from shelldon.broker.scripted_provider import ScriptedProvider

    if not brain.script:
        return ScriptedProvider()
    script = Path(brain.script).expanduser()
    return ScriptedProvider.from_file(script if script.is_absolute() else settings.home / script)
