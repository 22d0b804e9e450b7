"""What ``shelldon run`` and ``shelldon chat`` check before any actor starts.

A configuration that cannot work (no bot token, one that is not a token, no API key for a
provider that needs one) stops the start at once with one line saying what to fix, and the exit
status ``EXIT_CONFIG`` (78, EX_CONFIG), which the unit does not restart: an enabled service that
nobody has configured yet fails once at boot instead of crash-looping. A configuration that
works but surprises (nobody may talk to the pet) is a warning. ``shelldon doctor`` reports the
same findings with the same words.
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from dataclasses import dataclass

from shelldon.config import Settings
from shelldon.secrets import (
    SECRET_ENV,
    SecretMissingError,
    fallback_key,
    find_secret,
    provider_key,
)

EXIT_CONFIG = 78
"""Exit status of a configuration that cannot work (sysexits' EX_CONFIG)."""

BOT_TOKEN_SHAPE = re.compile(r"^[0-9]{3,20}:[A-Za-z0-9_-]{30,64}$")
"""What @BotFather hands out: the bot's numeric id, a colon, ~35 URL-safe characters."""


@dataclass(frozen=True, slots=True)
class Preflight:
    """``refusals``: why the service cannot start; ``warnings``: what works but surprises."""

    refusals: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def token_problem(settings: Settings, environ: MutableMapping[str, str] | None = None) -> str:
    """Why the bot token cannot work ("" when it looks right). Never includes the value."""
    try:
        found = find_secret("telegram_token", settings.vault, environ)
    except SecretMissingError as exc:
        return str(exc)
    if found is None:
        return (
            "no bot token configured: put the token from @BotFather in "
            f"{settings.vault / 'telegram_token'} (mode 0600), or as installed: "
            "sudo /opt/shelldon/src/deploy/install.sh --credential telegram_token"
        )
    return token_shape_problem(found)


def token_shape_problem(found: tuple[str, str]) -> str:
    """Why the token ``found`` (value, where) is not shaped like a bot token ("" when it is)."""
    if not BOT_TOKEN_SHAPE.match(found[0]):
        return (
            f"the bot token in {found[1]} does not look like one from @BotFather "
            "(<bot id>:<about 35 letters, digits, - or _>): check telegram_token"
        )
    return ""


def key_problem(
    settings: Settings, environ: MutableMapping[str, str] | None = None, *, fallback: bool = False
) -> str:
    """Why the configured brain (or, with ``fallback``, ``[brain.fallback]``) has no usable API
    key ("" when it has one or needs none)."""
    brain = settings.brain
    needed = fallback_key(brain) if fallback else provider_key(brain)
    if needed is None:
        return ""
    name, required = needed
    try:
        found = find_secret(name, settings.vault, environ)
    except SecretMissingError as exc:
        return str(exc)
    if found is not None or not required:
        return ""
    who = f"fallback {brain.fallback.provider!r}" if fallback else repr(brain.provider)
    where = f"no API key configured: provider {who} needs {name}; put it in "
    where += f"{settings.vault / name} (mode 0600)"
    if name not in SECRET_ENV:  # a key name of the owner's own: install.sh knows it not
        return where
    return f"{where}, or as installed: sudo /opt/shelldon/src/deploy/install.sh --credential {name}"


def preflight(
    settings: Settings, transport: str, environ: MutableMapping[str, str] | None = None
) -> Preflight:
    """What stops (or should worry) a start of the service with ``transport``."""
    refusals, warnings = [], []
    if transport == "telegram":
        problem = token_problem(settings, environ)
        if problem:
            refusals.append(problem)
        if not settings.telegram.allowed_users:
            warnings.append(
                "telegram.allowed_users is empty: nobody can talk to the pet until it is "
                "paired; send the bot a message in Telegram, then run the command it answers "
                "with (sudo shelldon pair CODE) on this machine"
            )
    for fallback in (False, True):
        problem = key_problem(settings, environ, fallback=fallback)
        if problem:
            refusals.append(problem)
    return Preflight(tuple(refusals), tuple(warnings))
