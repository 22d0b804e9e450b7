"""Ceilings held outside the worker, and supervision: the service outlives broken parts."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from actors import proctree
from shelldon.config import IN_PROCESS_BASE, ISOLATED_BASE
from shelldon.contracts import Decision, InboundMessage, Job, Message, Result, Role
from shelldon.worker import spawn

from .harness import Service

pytestmark = pytest.mark.slow

SCRIPT = [
    {"when": "time", "tool_calls": [{"name": "get_time", "args": {}}]},
    {"when": "time", "text": "Clock checked."},
    {
        "when": "note",
        "tool_calls": [{"name": "write_file", "args": {"path": "n.txt", "content": "x"}}],
    },
    {"when": "note", "text": "Saved."},
    {
        "when": "slow",
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(6 * 10**7))"}}],
    },
    {"when": "slow", "text": "Slow done."},
]


def patched_run_turn(real: Any) -> Any:
    """A worker loop that ignores its own ceilings when asked to ("rogue", "sleeper")."""

    def run_turn(request, registry, ask, settings, deadline):  # type: ignore[no-untyped-def]
        if "rogue" in request.text:
            for _ in range(50):
                ask(Job(request.turn_id, (Message(Role.USER, "more"),), (), deadline + 100))
            return Result(request.turn_id, "the rogue got away with it")
        if "sleeper" in request.text:
            time.sleep(1000)
        return real(request, registry, ask, settings, deadline)

    return run_turn


@pytest.fixture
def tampered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    # Actor processes fork from this one, so the patched loop is what their workers run.
    monkeypatch.setattr(spawn, "run_turn", patched_run_turn(spawn.run_turn))
    svc = Service(
        tmp_path / "home",
        SCRIPT,
        SHELLDON_LIMITS_TURN_TIMEOUT_S="2",
        SHELLDON_LIMITS_BAIL_MARGIN_S="0.5",
        SHELLDON_LIMITS_KILL_GRACE_S="0.5",
    )
    yield svc
    svc.stop()


def test_a_worker_past_the_model_call_ceiling_is_killed(tampered: Service) -> None:
    tampered.say("rogue")
    chunk = tampered.expect("limit of model calls")
    assert "got away" not in chunk
    tampered.say("what time is it")
    tampered.expect("Clock checked.")


def test_a_worker_past_its_deadline_is_killed_and_the_next_turn_runs(tampered: Service) -> None:
    before = time.monotonic()
    tampered.say("sleeper")
    tampered.expect("took longer than I'm allowed", timeout=10)
    assert time.monotonic() - before < 2 + 0.5 + 2.0
    assert not tampered.turn_workers()
    tampered.say("what time is it")
    tampered.expect("Clock checked.")


@pytest.fixture(params=[IN_PROCESS_BASE, ISOLATED_BASE])
def service(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    svc = Service(
        tmp_path / "home",
        SCRIPT,
        SHELLDON_LIMITS_EVAL_TIMEOUT_S="8",
        SHELLDON_LIMITS_TURN_TIMEOUT_S="10",
        SHELLDON_ACTORS_BASE=request.param,
    )
    yield svc
    svc.stop()


@pytest.fixture
def isolated(tmp_path: Path) -> Any:
    """The multiprocess base: each actor a process the test can SIGKILL."""
    svc = Service(
        tmp_path / "home",
        SCRIPT,
        SHELLDON_LIMITS_EVAL_TIMEOUT_S="8",
        SHELLDON_LIMITS_TURN_TIMEOUT_S="10",
        SHELLDON_ACTORS_BASE=ISOLATED_BASE,
    )
    yield svc
    svc.stop()


def test_killed_turn_actor_is_restarted_and_the_turn_in_flight_gets_an_apology(
    isolated: Service,
) -> None:
    service = isolated
    service.inject(InboundMessage(0, 0, "slow please"))
    time.sleep(0.3)
    os.kill(service.pid_of("turn"), signal.SIGKILL)
    service.expect("something broke", timeout=10)
    deadline = time.monotonic() + 10
    while service.status().restarts < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    service.say("what time is it")
    service.expect("Clock checked.")


def test_killed_arbiter_loses_nothing_parked(isolated: Service) -> None:
    service = isolated
    service.say("save a note")
    service.expect("[y/N]")
    (parked,) = service.store.pending()
    os.kill(service.pid_of("arbiter"), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while service.status().restarts < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert service.store.has_approval(parked.turn_id)
    service.inject(Decision(0, 0, parked.turn_id, True))
    service.expect("Approved")
    service.expect("Saved.")
    assert (service.settings.workspace / "n.txt").read_text() == "x"


def test_an_actor_that_gets_junk_keeps_serving(service: Service) -> None:
    for role in ("arbiter", "turn", "broker", "approvals", "transport"):
        service.tell(service.peers[role], {"not": "a contract"})
        service.tell(service.peers[role], Result("t-x", "stray"))
    service.say("what time is it")
    service.expect("Clock checked.")


@pytest.mark.parametrize("base", [IN_PROCESS_BASE, ISOLATED_BASE])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shelldon_chat_stops_on_signal_within_5s_leaving_nothing(
    tmp_path: Path, sig: int, base: str
) -> None:
    from .harness import chat_service, service_processes

    with chat_service(tmp_path / "h", base) as (proc, port):
        tree = service_processes(proc.pid, port)
        # isolated: main, admin, 7 actors (and the logger); in-process: main and the zygote
        assert len(tree) >= (8 if base == ISOLATED_BASE else 2), tree
        before = time.monotonic()
        proc.send_signal(sig)
        # SIGTERM is a service manager's clean stop; SIGINT is Ctrl-C, reported as shells do.
        assert proc.wait(timeout=6) == (130 if sig == signal.SIGINT else 0)
        assert time.monotonic() - before < 5.0
        if sig == signal.SIGINT:
            assert proc.stdout is not None
            assert proc.stdout.read().decode().endswith("shelldon: interrupted (Ctrl-C)\n")
        time.sleep(0.3)
        assert not [p for p in tree if proctree.is_alive(p)]
