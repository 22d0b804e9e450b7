"""System tests: the installed product under real systemd, inside the Debian bookworm VM.

They run only where the product is installed and systemd is PID 1, and only when asked
(``SHELLDON_SYSTEM_TESTS=1``, set by ``tests/system/run-vm.sh``). Anywhere else this directory
collects nothing at all: the dev suite (``./test`` → ``pytest tests``) sees neither skips nor
failures from it.

    tests/system/run-vm.sh [--pi] [--smoke] [--rebuild]      (on the host, as root)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.system.rig import Bot, Brain, Pet


def _in_the_vm() -> bool:
    return (
        bool(os.environ.get("SHELLDON_SYSTEM_TESTS"))
        and Path("/run/systemd/system").is_dir()
        and Path("/opt/shelldon/venv/bin/shelldon").exists()
        and Path("/etc/systemd/system/shelldon.service").exists()
        and os.geteuid() == 0
    )


if not _in_the_vm():
    collect_ignore_glob = ["*"]

# Generous by default: the VM is emulated, about a Pi Zero 2W's speed.
DEFAULT_TIMEOUT_S = 600


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "smoke: the short system smoke CI runs (install, READY, a turn, a tool, a restart)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DEFAULT_TIMEOUT_S))


@pytest.fixture(scope="session")
def bot() -> Iterator[Bot]:
    """The fake Bot API, on the VM's loopback, for the whole session (the config points at it)."""
    from tests.system.rig import Bot

    b = Bot()
    try:
        yield b
    finally:
        b.close()


@pytest.fixture(scope="session")
def brain() -> Iterator[Brain]:
    """The fake LLM (OpenAI-compatible, keyless on loopback), for the whole session."""
    from tests.system.rig import Brain

    b = Brain().start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def configured(bot: Bot, brain: Brain) -> Pet:
    """The installed service, configured for the fakes and restarted once."""
    from tests.system.rig import Pet

    pet = Pet(bot, brain)
    pet.configure()
    return pet


@pytest.fixture
def pet(configured: Pet) -> Pet:
    """The configured service, running and ready, with no canned answers left over."""
    configured.fresh()
    return configured
