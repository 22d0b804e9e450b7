"""Fixtures: a hardened multiprocTCPBase system on a free loopback port, always stopped."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from actors.hardening import TRUSTED
from actors.system import RunningSystem, start_actor_system, stop_actor_system

# The probes' messages travel between processes: trust them before any system forks.
TRUSTED.trust_module("tests.integration.actors.messages")
TRUSTED.trust_actor_package("tests.integration.actors")


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def admin_port() -> int:
    """A fresh admin port for this test."""
    return free_port()


@pytest.fixture
def running(admin_port: int) -> Iterator[RunningSystem]:
    """A hardened multiprocTCPBase system, stopped (and checked) even if the test fails."""
    system = start_actor_system(admin_port=admin_port)
    try:
        yield system
    finally:
        stop_actor_system(system)
