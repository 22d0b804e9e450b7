"""``ContractActor`` checks every message at the door and never lets a handler's exception
reach Thespian (whose redelivery would repeat the handler's side effects)."""

from __future__ import annotations

import pytest
import structlog.testing
from thespian.actors import ActorAddress, ActorExitRequest, PoisonMessage

from actors.base import ContractActor
from actors.system import RunningSystem
from tests.integration.actors.messages import (
    Calls,
    CountCalls,
    Explode,
    Ping,
    Pong,
    Stranger,
    Watched,
    WatchPipe,
)
from tests.integration.actors.probes import PlainActor, ProbeActor


def test_a_declared_message_reaches_its_handler(running: RunningSystem) -> None:
    probe = running.system.createActor(ProbeActor)

    reply = running.system.ask(probe, Ping("hi"), 5)

    assert isinstance(reply, Pong)
    assert reply.text == "hi"


@pytest.mark.parametrize("stranger", [Stranger("knock knock"), 42, ("a", "tuple")])
def test_an_undeclared_message_is_dropped_and_the_actor_keeps_serving(
    running: RunningSystem, stranger: object
) -> None:
    probe = running.system.createActor(ProbeActor)

    assert running.system.ask(probe, stranger, 0.3) is None
    assert isinstance(running.system.ask(probe, Ping("next"), 5), Pong)


def test_a_raising_handler_runs_once_and_the_actor_keeps_serving(running: RunningSystem) -> None:
    probe = running.system.createActor(ProbeActor)

    running.system.tell(probe, Explode(turn_id="t-1"))
    calls = running.system.ask(probe, CountCalls(), 5)

    assert calls == Calls(1)
    assert isinstance(running.system.ask(probe, Ping("next"), 5), Pong)


def test_without_the_base_thespian_runs_a_raising_handler_twice(running: RunningSystem) -> None:
    # The reason the base exists: Thespian redelivers a message whose handler raised.
    plain = running.system.createActor(PlainActor)

    running.system.tell(plain, Explode())
    poison = running.system.ask(plain, CountCalls(), 5)
    calls = running.system.listen(5)

    assert isinstance(poison, PoisonMessage)  # Thespian's "gave up after the second try"
    assert calls == Calls(2)


def test_system_messages_reach_declared_handlers(running: RunningSystem) -> None:
    probe = running.system.createActor(ProbeActor)

    woke = running.system.ask(probe, "wake me", 5)

    assert isinstance(woke, Pong)
    assert woke.text == "woke"


def test_a_watched_descriptor_wakes_the_actor_until_it_is_unwatched(
    running: RunningSystem,
) -> None:
    probe = running.system.createActor(ProbeActor)

    reply = running.system.ask(probe, WatchPipe(b"frame bytes"), 5)

    assert reply == Watched(b"frame bytes")
    assert isinstance(running.system.ask(probe, Ping("after EOF"), 5), Pong)


def test_the_door_logs_what_it_drops_and_what_failed() -> None:
    # In-process: the door is plain Python, no actor system needed to read its log.
    probe = ProbeActor()
    with structlog.testing.capture_logs() as logs:
        probe.receiveMessage(Stranger("x"), ActorAddress(None))
        probe.receiveMessage(Explode(turn_id="t-9"), ActorAddress(None))
        probe.receiveMessage(ActorExitRequest(), ActorAddress(None))

    dropped, failed, exit_request = logs
    assert (dropped["event"], dropped["log_level"]) == ("message_dropped", "warning")
    assert dropped["message_type"].endswith("messages.Stranger")
    assert (failed["event"], failed["message_type"], failed["log_level"]) == (
        "handler_failed",
        "Explode",
        "error",
    )
    assert exit_request["event"] == "system_message_unhandled"
    assert probe.explosions == 1


def test_a_handler_without_a_message_annotation_is_refused_at_definition() -> None:
    with pytest.raises(TypeError, match=r"annotate the message parameter"):

        class _Sloppy(ContractActor):
            def receiveMsg_Ping(self, msg, sender):  # type: ignore[no-untyped-def]
                pass


def test_a_handler_whose_annotation_disagrees_with_its_name_is_refused() -> None:
    with pytest.raises(TypeError, match=r"must be the class Ping"):

        class _Confused(ContractActor):
            def receiveMsg_Ping(self, msg: Pong, sender: ActorAddress) -> None:
                pass
