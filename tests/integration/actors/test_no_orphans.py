"""No process of the actor system outlives its parent, and stopping always ends every process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from actors import proctree
from actors.system import RunningSystem, start_actor_system, stop_actor_system
from tests.integration.actors.messages import Block, Ping, Pong, SpawnChildren, Spawned
from tests.integration.actors.probes import ProbeActor


def _pid_of(running: RunningSystem, address: object) -> int:
    reply = running.system.ask(address, Ping("pid?"), 5)
    assert isinstance(reply, Pong)
    return reply.pid


def _gone_within(pids: set[int], seconds: float) -> set[int]:
    """The pids still alive after waiting up to ``seconds`` for all of them to die."""
    deadline = time.monotonic() + seconds
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.02)
        alive = {pid for pid in alive if proctree.is_alive(pid)}
    return alive


def test_killing_the_supervisor_then_the_admin_leaves_no_process(running: RunningSystem) -> None:
    supervisor = running.system.createActor(ProbeActor)
    spawned = running.system.ask(supervisor, SpawnChildren(3), 5)
    assert isinstance(spawned, Spawned)
    grand = running.system.ask(spawned.addresses[0], SpawnChildren(1), 5)
    assert isinstance(grand, Spawned)
    supervisor_pid = _pid_of(running, supervisor)
    below = {_pid_of(running, a) for a in (*spawned.addresses, *grand.addresses)}
    everything = running.pids()
    assert len(everything) == 7  # Admin, logger, supervisor, 3 children, 1 grandchild

    os.kill(supervisor_pid, signal.SIGKILL)
    assert _gone_within(below | {supervisor_pid}, 1.0) == set()

    (admin,) = proctree.listeners_on_port(running.admin_port)
    os.kill(admin, signal.SIGKILL)
    assert _gone_within(everything, 1.0) == set()
    assert running.pids() == set()


def test_sigterm_to_the_admin_ends_the_system_even_if_the_service_handles_sigterm(
    admin_port: int,
) -> None:
    # `shelldon run` installs a SIGTERM handler before it starts the system; the Admin must not
    # inherit it (Thespian sets none there) or it would ignore systemd's SIGTERM.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        running = start_actor_system(admin_port=admin_port)
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        probe = running.system.createActor(ProbeActor)
        assert isinstance(running.system.ask(probe, SpawnChildren(2), 5), Spawned)
        everything = running.pids()
        assert len(everything) == 5

        assert running.session_id is not None
        os.kill(running.session_id, signal.SIGTERM)  # the Admin's pid is the session id

        assert _gone_within(everything, 1.0) == set()
    finally:
        stop_actor_system(running)


@pytest.mark.slow
def test_stop_ends_every_process_within_five_seconds_even_with_an_actor_stuck_in_a_handler(
    admin_port: int,
) -> None:
    running = start_actor_system(admin_port=admin_port)
    try:
        stuck = running.system.createActor(ProbeActor)
        running.system.tell(stuck, Block(seconds=60))
        assert len(running.pids()) == 3
    finally:
        started = time.monotonic()
        stop_actor_system(running)
        took = time.monotonic() - started

    assert took < 5.0
    assert running.pids() == set()


_STARTER = textwrap.dedent(
    """
    import sys, time
    from actors.hardening import TRUSTED
    TRUSTED.trust_module("tests.integration.actors.messages")
    TRUSTED.trust_actor_package("tests.integration.actors")
    from actors.system import start_actor_system
    from tests.integration.actors.messages import SpawnChildren
    from tests.integration.actors.probes import ProbeActor

    running = start_actor_system(admin_port=int(sys.argv[1]))
    probe = running.system.createActor(ProbeActor)
    running.system.ask(probe, SpawnChildren(2), 5)
    print("PIDS", *sorted(running.pids()), flush=True)
    time.sleep(60)
    """
)


@pytest.mark.slow
def test_killing_the_service_process_leaves_no_process_of_its_system(admin_port: int) -> None:
    # The service's main process can be OOM-killed: its actor system must not outlive it.
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER, str(admin_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        assert starter.stdout is not None
        line = next(line for line in starter.stdout if line.startswith("PIDS "))
        pids = {int(p) for p in line.split()[1:]}
        assert len(pids) == 5  # Admin, logger, probe, 2 children

        starter.kill()
        starter.wait(5)

        assert _gone_within(pids, 1.0) == set()
        assert proctree.listeners_on_port(admin_port) == set()
    finally:
        starter.kill()
        starter.wait(5)
