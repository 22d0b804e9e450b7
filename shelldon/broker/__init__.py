"""The provider seam: holds credentials, normalizes tool calls, executes nothing.

``load_provider(settings)`` builds the configured ``Provider``, importing its adapter only
then, so ``import anthropic`` (~70 MB) happens only for ``provider = "anthropic"``.
``load_fallback`` reads ``[brain.fallback]``'s key at once but builds its provider only when a
turn first needs it (``fallback.py``); ``load_failover`` puts the two together.

Keys come from ``shelldon.secrets``, which also decides whether one is required: an
OpenAI-compatible ``base_url`` on this machine or the local network (llama.cpp's server,
Ollama) may have none, and none is then sent. A public endpoint without a key, main or
fallback, is a start-up error (``SecretMissingError``), never a request that goes out
unauthenticated.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import structlog

from shelldon.broker.fallback import Failover
from shelldon.broker.provider import Provider, ProviderError
from shelldon.config import Settings
from shelldon.contracts import JobFailed
from shelldon.secrets import (
    SecretMissingError,
    fallback_key,
    find_secret,
    provider_key,
    read_secret,
)

log = structlog.get_logger(__name__)


def load_provider(settings: Settings) -> Provider:
    """The ``Provider`` that ``settings.brain`` configures, with its key loaded; raises
    ``SecretMissingError`` for a missing key, ``ScriptError`` for an unusable script."""
    brain = settings.brain
    needed = provider_key(brain)
    if needed is not None:
        api_key = _key(needed, settings)
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
    api_key = _key(needed, settings)
    return lambda: _adapter(fb.provider, fb.model, fb.base_url, api_key, settings)


def load_failover(settings: Settings) -> Failover:
    """The main provider with its fallback behind it; raises as ``load_provider`` does."""
    brain = settings.brain
    main = load_provider(settings)
    try:
        make_fallback = load_fallback(settings)
    except SecretMissingError as exc:
        # Start-up refuses this; a key gone since then costs the fallback, not the main.
        make_fallback = None
        log.error("fallback_not_loaded", error=str(exc))
    fallback = (brain.fallback.provider, brain.fallback.model)
    log.info(
        "brain_ready",
        provider=brain.provider,
        model=brain.model,
        fallback=" ".join(fallback) if make_fallback else "none",
    )
    return Failover(
        main,
        (brain.provider, brain.model),
        make_fallback,
        fallback,
        fallback_sees=settings.photos.enabled(brain.fallback),
    )


def job_failed(turn_id: str, error: BaseException) -> JobFailed:
    """What the worker is told when a provider call raised ``error``, logged once: a
    ``ProviderError`` keeps its kind; anything else is a bug of ours, a "server" failure."""
    if isinstance(error, ProviderError):
        log.warning("model_call_failed", turn_id=turn_id, kind=error.kind, error=error.message)
        return JobFailed(turn_id, error.kind, error.message, error.retry_after)
    log.error("model_call_crashed", turn_id=turn_id, error=f"{type(error).__name__}: {error}")
    return JobFailed(turn_id, "server", f"internal error: {type(error).__name__}")


def _key(needed: tuple[str, bool], settings: Settings) -> str | None:
    """The value of secret ``needed = (name, required)``; None for an optional one not found."""
    name, required = needed
    if required:
        return read_secret(name, settings.vault)
    found = find_secret(name, settings.vault)
    return found[0] if found else None


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
