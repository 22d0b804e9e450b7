"""Secrets: bot token and API keys, read from files and never from an environment forks inherit.

Order for each name: ``$CREDENTIALS_DIRECTORY/<name>`` (systemd ``LoadCredential=``), then
``<home>/vault/<name>``, then an environment variable, which is removed from ``os.environ`` as
soon as it is read (``take_env_secrets``, called once at start, before anything forks).
A secret file holds one value; surrounding whitespace is stripped. Values are never logged.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from shelldon.config import BrainSettings

SECRET_ENV = {
    "telegram_token": "TELEGRAM_BOT_TOKEN",
    "anthropic_api_key": "ANTHROPIC_API_KEY",
    "openai_api_key": "OPENAI_API_KEY",
}
"""Each secret's file name and the environment variable that may carry it instead."""

_env_taken: dict[str, str] = {}

LOCAL_SUFFIXES = (".local", ".lan", ".internal", ".home.arpa")
"""Host name endings of the local network: an OpenAI-compatible server there needs no key."""


def is_local_url(url: str) -> bool:
    """True when ``url``'s host is this machine or on the local network (no key needed)."""
    host = (urlsplit(url).hostname or "").lower()
    if not host:
        return False
    if host == "localhost" or host.endswith((".localhost", *LOCAL_SUFFIXES)):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _key_required(provider: str, base_url: str) -> bool:
    """Only an OpenAI-compatible server on this machine or the LAN (llama.cpp, Ollama) may do
    without a key ("" is api.openai.com: not local)."""
    return not (provider == "openai" and is_local_url(base_url))


def provider_key(brain: BrainSettings) -> tuple[str, bool] | None:
    """The secret the configured brain uses and whether it is required, or None (scripted)."""
    if brain.provider not in ("anthropic", "openai"):
        return None
    return f"{brain.provider}_api_key", _key_required(brain.provider, brain.base_url)


def fallback_key(brain: BrainSettings) -> tuple[str, bool] | None:
    """The secret ``[brain.fallback]`` uses and whether it is required, or None (no fallback)."""
    fb = brain.fallback
    if not fb.provider:
        return None
    return fb.key_name, _key_required(fb.provider, fb.base_url)


class SecretMissingError(RuntimeError):
    """A secret the configuration needs was found nowhere; the message says where to put it."""


SECRETS_FD_VAR = "SHELLDON_SECRETS_FD"
"""Names the pipe through which a re-exec'd shelldon receives the environment's secrets."""


def reexec_without_env_secrets(argv: list[str]) -> None:
    """If a secret arrived in the environment, start shelldon again without it (never returns).

    Removing a variable from ``os.environ`` does not wipe the process's initial environment
    block, which every fork inherits and anyone can read in ``/proc/<pid>/environ``. So the
    values travel through a pipe to a fresh exec whose environment never held them.
    """
    found = {var: os.environ[var] for var in SECRET_ENV.values() if os.environ.get(var)}
    if not found:
        return
    read_end, write_end = os.pipe()
    os.write(write_end, json.dumps(found).encode())
    os.close(write_end)
    os.set_inheritable(read_end, True)
    env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV.values()}
    env[SECRETS_FD_VAR] = str(read_end)
    os.execve(sys.executable, [sys.executable, "-m", "shelldon", *argv], env)  # noqa: S606 - argv is ours


def _take_piped_secrets(env: MutableMapping[str, str]) -> None:
    raw_fd = env.pop(SECRETS_FD_VAR, None)
    if raw_fd is None or not raw_fd.isdigit():
        return
    try:
        with open(int(raw_fd), "rb") as pipe:
            piped = json.loads(pipe.read() or b"{}")
    except (OSError, ValueError):
        return
    for name, var in SECRET_ENV.items():
        value = piped.get(var)
        if isinstance(value, str) and value.strip():
            _env_taken[name] = value.strip()


def take_env_secrets(environ: MutableMapping[str, str] | None = None) -> None:
    """Move secret environment variables out of the environment (so no fork inherits them)."""
    env = os.environ if environ is None else environ
    _take_piped_secrets(env)
    for name, var in SECRET_ENV.items():
        value = env.pop(var, None)
        if value is not None and value.strip():
            _env_taken[name] = value.strip()


def find_secret(
    name: str, vault: Path, environ: MutableMapping[str, str] | None = None
) -> tuple[str, str] | None:
    """Return ``(value, where)`` for secret ``name``, or None. ``where`` never holds the value."""
    creds = (os.environ if environ is None else environ).get("CREDENTIALS_DIRECTORY")
    for directory in (Path(creds), vault) if creds else (vault,):
        path = directory / name
        try:
            value = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise SecretMissingError(f"secret {name}: cannot read {path}: {exc}") from None
        if value:
            return value, str(path)
    take_env_secrets(environ)
    if name in _env_taken:
        return _env_taken[name], f"${SECRET_ENV[name]} (moved out of the environment)"
    return None


def read_secret(name: str, vault: Path, environ: MutableMapping[str, str] | None = None) -> str:
    """The value of secret ``name``; raises ``SecretMissingError`` saying where to put it."""
    found = find_secret(name, vault, environ)
    if found is None:
        where = f"put it in {vault / name} (mode 0600), or load it with systemd "
        where += f"LoadCredential={name}:..."
        if name in SECRET_ENV:  # a key name of the owner's own has none: forks inherit variables
            where += f", or set ${SECRET_ENV[name]}"
        raise SecretMissingError(f"secret {name} not found: {where}")
    return found[0]


def forget_env_secrets() -> None:
    """Drop secrets taken from the environment (tests; a process that must not keep them)."""
    _env_taken.clear()
