"""Every socket of the actor system listens on loopback only, on the configured admin port."""

from __future__ import annotations

import pytest

from actors import proctree
from actors.system import ActorSystemError, RunningSystem, start_actor_system
from tests.integration.actors.messages import SpawnChildren, Spawned
from tests.integration.actors.probes import ProbeActor

LOOPBACK = {"127.0.0.1", "::1"}


def test_every_listening_socket_of_the_system_is_loopback(running: RunningSystem) -> None:
    parent = running.system.createActor(ProbeActor)
    spawned = running.system.ask(parent, SpawnChildren(2), 5)
    assert isinstance(spawned, Spawned)

    pids = running.pids()
    sockets = proctree.listening_sockets(pids)

    # Admin + logger + parent + 2 children, each with its own listener and nothing inherited.
    assert len(pids) == 5
    assert len(sockets) == 5
    assert {s.pid for s in sockets} == pids
    exposed = [s for s in sockets if s.address not in LOOPBACK]
    assert exposed == [], f"listening beyond loopback: {exposed}"


def test_the_admin_listens_on_the_configured_port(running: RunningSystem) -> None:
    admins = [s for s in proctree.listening_sockets(running.pids()) if s.port == running.admin_port]

    assert len(admins) == 1
    assert admins[0].address == "127.0.0.1"


def test_a_port_already_in_use_is_refused_with_a_clear_error(running: RunningSystem) -> None:
    with pytest.raises(ActorSystemError, match=rf"admin port {running.admin_port} is already in"):
        start_actor_system(admin_port=running.admin_port)
