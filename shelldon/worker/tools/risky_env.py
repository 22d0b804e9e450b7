"""The world an approved call's child starts in: a fresh empty HOME and an environment allowlist.

The workspace is writable by every self-coded tool, so nothing in it may be read as
configuration by an approved call: with ``HOME`` in the workspace, a planted ``.curlrc``,
``.gitconfig``, ``~/.local/lib/python3.*/site-packages/*.pth`` or ``~/.ssh/config`` would run or
steer the very command the owner approved. Each RISKY child therefore gets a home made empty
for that one call (``fresh_home``) and an environment built from nothing (``risky_env``). Git's
settings are pinned in the home's ``gitconfig`` too, not only on the command line: a git started
by a git (a local push runs ``receive-pack`` with ``GIT_CONFIG_COUNT`` cleared) still runs no
hook and no fsmonitor. Plain functions, so whichever process runs the child prepares the same.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
HOME_PREFIX = "shelldon-home-"
GITCONFIG_NAME = "gitconfig"

# Git settings that switch off every program a repository (or a hostile home) could name for
# git to run, at the scope given: command line (GIT_CONFIG_COUNT) or the home's gitconfig. Any
# git started in an approved child sees them.
NO_GIT_PROGRAMS: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    # git reads ~/.config/git/attributes even with no global config: never a planted one.
    ("core.attributesFile", "/dev/null"),
    # A planted bare repository (config, HEAD, objects) at the workspace root is no repository.
    ("safe.bareRepository", "explicit"),
)


def gitconfig_text() -> str:
    """``NO_GIT_PROGRAMS`` in git config file syntax (one section per key; our own values)."""
    lines = []
    for key, value in NO_GIT_PROGRAMS:
        section, _, name = key.rpartition(".")
        lines.append(f"[{section}]\n\t{name} = {value}\n")
    return "".join(lines)


@contextlib.contextmanager
def fresh_home() -> Iterator[Path]:
    """A new directory (mode 0700, in the system temp dir) to be one call's HOME, holding only
    git's pinned ``gitconfig`` and an empty ``tmp``; removed, with whatever the call left in it,
    when the block ends."""
    home = Path(tempfile.mkdtemp(prefix=HOME_PREFIX))
    try:
        (home / GITCONFIG_NAME).write_text(gitconfig_text())
        (home / "tmp").mkdir(mode=0o700)
        yield home
    finally:
        shutil.rmtree(home, ignore_errors=True)


def safe_path(workspace: Path, path: str | None = None) -> str:
    """The PATH a child runs with: only absolute entries, none inside the workspace (an empty,
    relative or workspace entry would run a program the workspace planted)."""
    root = os.path.realpath(workspace)
    kept = []
    for entry in (path if path is not None else os.environ.get("PATH", DEFAULT_PATH)).split(":"):
        if not entry.startswith("/"):
            continue
        real = os.path.realpath(entry)
        if real == root or real.startswith(root.rstrip("/") + "/"):
            continue
        kept.append(entry)
    return ":".join(kept) or DEFAULT_PATH


def git_config_env(settings: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """``settings`` as command-line-scope git config (``GIT_CONFIG_COUNT``), which outranks
    every config file, the repository's own included."""
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for index, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def risky_env(
    workspace: Path, home: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The whole environment of an approved call's child: nothing inherited but a safe PATH.
    ``extra`` adds to it or replaces entries (the git tool pins more settings)."""
    env = {
        "PATH": safe_path(workspace),
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONNOUSERSITE": "1",
        # Any git in the child: no system config, the home's pinned gitconfig as global config.
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_SYSTEM": "/dev/null",
        "GIT_CONFIG_GLOBAL": str(home / GITCONFIG_NAME),
        "GIT_CEILING_DIRECTORIES": str(workspace.parent),
        "GIT_TERMINAL_PROMPT": "0",
        **git_config_env(NO_GIT_PROGRAMS),
    }
    env.update(extra or {})
    return env


@dataclass(frozen=True, slots=True)
class ChildRun:
    """A prepared approved call: the program to start and its whole environment (the workspace
    is its working directory); ``what`` names it in errors ("command", "git fetch")."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    what: str
