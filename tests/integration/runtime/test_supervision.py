"""Ceilings held outside the worker, and supervision: the service outlives broken parts."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from shelldon.contracts import Decision, InboundMessage, Job, Message, Result, Role
from shelldon.worker import spawn
from tests import proctree

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
    wait_reaped(tampered)  # killed at once; reaped by the zygote just after
    tampered.say("what time is it")
    tampered.expect("Clock checked.")


def wait_reaped(service: Service, timeout: float = 2.0) -> None:
    """Until no turn worker is left (nobody waits for one: the zygote reaps it)."""
    until = time.monotonic() + timeout
    while service.turn_workers():
        assert time.monotonic() < until, "the killed worker was not reaped"
        time.sleep(0.01)


@pytest.fixture
def service(tmp_path: Path) -> Any:
    svc = Service(
        tmp_path / "home",
        SCRIPT,
        SHELLDON_LIMITS_EVAL_TIMEOUT_S="8",
        SHELLDON_LIMITS_TURN_TIMEOUT_S="10",
    )
    yield svc
    svc.stop()


def crash_and_wait(service: Service, role: str, timeout: float = 10) -> None:
    """Crash ``role`` (a Crash drill) and wait until a fresh instance has taken its place."""
    old = service.peers[role]
    service.crash(role)
    deadline = time.monotonic() + timeout
    while service.status().peers[role] == old:
        assert time.monotonic() < deadline, f"the supervisor did not restart {role}"
        time.sleep(0.05)


def test_a_crashed_turn_actor_is_restarted_and_the_turn_in_flight_gets_an_apology(
    service: Service,
) -> None:
    service.inject(InboundMessage(0, 0, "slow please"))
    time.sleep(0.3)
    crash_and_wait(service, "turn")
    service.expect("something broke", timeout=10)
    wait_reaped(service)  # the crashed actor's worker was killed, and the zygote reaped it
    service.say("what time is it")
    service.expect("Clock checked.")


def test_a_crashed_arbiter_loses_nothing_parked(service: Service) -> None:
    service.say("save a note")
    service.expect("[y/N]")
    (parked,) = service.store.parked.pending()
    crash_and_wait(service, "arbiter")
    assert service.store.parked.parked_approval(parked.turn_id)
    service.inject(Decision(0, 0, parked.turn_id, True))
    service.expect("Approved")
    service.expect("Saved.")
    assert (service.settings.workspace / "n.txt").read_text() == "x"


def test_repeated_crashes_back_off(service: Service) -> None:
    started = time.monotonic()
    for _ in range(3):
        crash_and_wait(service, "strikes")
    # restarted after 0.1, 0.2 and 0.4 s; the service kept answering through them
    assert time.monotonic() - started >= 0.7
    service.say("what time is it")
    service.expect("Clock checked.")
    assert service.status().restarts == 3


def test_the_supervisor_itself_does_not_crash_on_a_handler_error(service: Service) -> None:
    service.crash("supervisor")
    assert service.status().ready  # still answering, still the same supervisor
    service.say("what time is it")
    service.expect("Clock checked.")


def test_an_actor_that_gets_junk_keeps_serving(service: Service) -> None:
    for role in ("arbiter", "turn", "broker", "transport"):
        service.tell(service.peers[role], {"not": "a contract"})
        service.tell(service.peers[role], Result("t-x", "stray"))
    service.say("what time is it")
    service.expect("Clock checked.")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_shelldon_chat_stops_on_signal_within_5s_leaving_nothing(tmp_path: Path, sig: int) -> None:
    from .harness import chat_service, service_processes

    with chat_service(tmp_path / "h") as proc:
        tree = service_processes(proc.pid)
        assert len(tree) >= 2, tree  # the main process and the zygote
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
