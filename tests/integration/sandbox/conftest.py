"""Fixtures of the sandbox tests: settings with a forced filesystem layer, planted secrets, a
tmp HOME with a fake ~/.ssh key, a loopback listener, and a test-owned cgroup where possible."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.proc import sandbox

from .probe import plant_secrets

CGROUP_V2 = Path("/sys/fs/cgroup/unified")


def confined(settings: Settings, layer: str, mode: str = "best-effort") -> Settings:
    """``settings`` with the filesystem layer forced to ``layer``, in ``mode``."""
    box = dataclasses.replace(settings.sandbox, fs=layer, mode=mode)
    return dataclasses.replace(settings, sandbox=box)


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tmp HOME (the worker keeps HOME) holding a fake ~/.ssh/id_rsa."""
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def planted(settings: Settings, user_home: Path) -> Settings:
    """Settings whose vault, database and ~/.ssh hold something worth stealing."""
    plant_secrets(settings, user_home)
    return settings


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP listener on 127.0.0.1 the test owns; yields its port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        yield srv.getsockname()[1]


@pytest.fixture
def test_cgroup() -> Iterator[Path]:
    """A cgroup v2 directory this test creates (and removes): shelldon-test-<pid>-<n>."""
    if not (CGROUP_V2 / "cgroup.procs").exists() or not os.access(CGROUP_V2, os.W_OK):
        pytest.skip("no writable cgroup v2 hierarchy here: the subreaper path is tested instead")
    path = CGROUP_V2 / f"shelldon-test-{os.getpid()}-{id(object())}"
    path.mkdir()
    try:
        yield path
    finally:
        for child in path.iterdir():
            if child.is_dir():
                sandbox.TurnCgroup(child).close()
        sandbox.TurnCgroup(path).close()
