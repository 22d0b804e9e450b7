"""``shelldon doctor``: checks a person can read, one line each, and an exit status.

It grows with each capability (sandbox layers, limits, systemd). Secrets are reported as found
or missing with where they came from — never their values.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from typing import TextIO

from shelldon import __version__
from shelldon.config import Settings
from shelldon.secrets import SecretMissingError, find_secret


@dataclass(frozen=True, slots=True)
class Check:
    """One finding: ``ok`` False means the service would not work as configured."""

    name: str
    ok: bool
    detail: str
    required: bool = True


def _needed_secrets(settings: Settings) -> list[str]:
    needed = []
    if settings.brain.provider == "anthropic":
        needed.append("anthropic_api_key")
    elif settings.brain.provider == "openai":
        needed.append("openai_api_key")
    return needed


def gather_checks(settings: Settings) -> list[Check]:
    """Every check, in display order."""
    checks = [
        Check("shelldon", True, __version__),
        Check(
            "python",
            sys.version_info >= (3, 11),
            f"{platform.python_version()} ({sys.executable})",
        ),
        Check(
            "config",
            True,
            str(settings.config_path) if settings.config_path else "none (defaults in use)",
        ),
        Check("home", True, str(settings.home), required=False),
        Check("provider", True, f"{settings.brain.provider} (model {settings.brain.model})"),
    ]
    home_ok = settings.home.exists() and os.access(settings.home, os.W_OK)
    checks.append(
        Check(
            "home writable",
            home_ok or not settings.home.exists(),
            "yes" if home_ok else ("will be created" if not settings.home.exists() else "no"),
        )
    )
    needed = set(_needed_secrets(settings))
    for name in ("telegram_token", "anthropic_api_key", "openai_api_key"):
        try:
            found = find_secret(name, settings.vault)
        except SecretMissingError as exc:
            checks.append(Check(f"secret {name}", False, str(exc)))
            continue
        if found is not None:
            checks.append(Check(f"secret {name}", True, f"found in {found[1]}"))
        else:
            if name in needed:
                detail, ok = "missing (needed by the configured provider)", False
            elif name == "telegram_token":
                detail, ok = "missing (needed by `shelldon run`)", False
            else:
                detail, ok = "not needed by the configured provider", True
            checks.append(Check(f"secret {name}", ok, detail, required=name in needed))
    users = settings.telegram.allowed_users
    checks.append(
        Check(
            "telegram.allowed_users",
            bool(users),
            ", ".join(map(str, users)) if users else "empty: nobody can talk to the pet",
            required=False,
        )
    )
    return checks


def run_doctor(settings: Settings, out: TextIO) -> int:
    """Print the checks; 0 when every required check passed, else 1."""
    checks = gather_checks(settings)
    width = max(len(c.name) for c in checks)
    for c in checks:
        mark = "ok " if c.ok else ("FAIL" if c.required else "warn")
        out.write(f"{mark:4} {c.name:<{width}}  {c.detail}\n")
    failed = [c for c in checks if not c.ok and c.required]
    out.write("all good\n" if not failed else f"{len(failed)} problem(s)\n")
    return 0 if not failed else 1
