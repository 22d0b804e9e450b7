"""`shelldon chat`, `run` and `demo` keep the pet's home private: the home, vault, workspace and
logs 0700 and the database 0600, whatever the umask, and an existing home keeps its mode."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def run_as_owner(args: list[str], home: Path, umask: int = 0o022) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")}
    env |= {"SHELLDON_HOME": str(home)}
    code = f"import os, runpy, sys; os.umask({umask}); sys.argv = ['shelldon', *{args!r}]; "
    code += "runpy.run_module('shelldon', run_name='__main__')"
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=60,
    ).returncode


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_chat_creates_a_private_home(tmp_path: Path, umask: int) -> None:
    home = tmp_path / "pet"
    assert run_as_owner(["chat"], home, umask) == 0
    for directory in (home, home / "vault", home / "workspace", home / "toolbox", home / "logs"):
        assert mode(directory) == 0o700, directory
    assert mode(home / "shelldon.db") == 0o600
    assert mode(home / "logs" / "shelldon.jsonl") == 0o600


def test_run_creates_a_private_home_even_when_it_cannot_start(tmp_path: Path) -> None:
    home = tmp_path / "pet"
    assert run_as_owner(["run"], home, 0o000) == 78  # no token yet
    assert mode(home) == 0o700 and mode(home / "vault") == 0o700


def test_the_demo_home_is_private(tmp_path: Path) -> None:
    home = tmp_path / "demo"
    assert run_as_owner(["demo", "--yes", "--home", str(home)], home, 0o000) == 0
    assert mode(home) == 0o700 and mode(home / "vault") == 0o700
    assert mode(home / "shelldon.db") == 0o600


def test_an_existing_home_keeps_its_mode(tmp_path: Path) -> None:
    home = tmp_path / "pet"
    home.mkdir(mode=0o750)
    home.chmod(0o750)
    assert run_as_owner(["chat"], home) == 0
    assert mode(home) == 0o750
    assert mode(home / "vault") == 0o700
