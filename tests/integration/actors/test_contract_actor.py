"""``ContractActor`` checks every message at the door and never lets a handler's exception
reach Thespian (whose redelivery would repeat the handler's side effects): an actor whose handler
raised stops instead (let it crash), and its parent is told."""

from __future__ import annotations

import pytest
import structlog.testing
from thespian.actors import ActorAddress

from actors.base import ContractActor
from tests.integration.actors.conftest import Looped
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


def test_a_declared_message_reaches_its_handler(running: Looped) -> None:
    probe = running.createActor(ProbeActor)

    reply = running.ask(probe, Ping("hi"), 5)

    assert isinstance(reply, Pong)
    assert reply.text == "hi"


@pytest.mark.parametrize("stranger", [Stranger("knock knock"), 42, ("a", "tuple")])
def test_an_undeclared_message_is_dropped_and_the_actor_keeps_serving(
    running: Looped, stranger: object
) -> None:
    probe = running.createActor(ProbeActor)

    assert running.ask(probe, stranger, 0.3) is None
    assert isinstance(running.ask(probe, Ping("next"), 5), Pong)


def test_a_raising_handler_runs_once_and_the_actor_stops(running: Looped) -> None:
    probe = running.createActor(ProbeActor)

    running.tell(probe, CountCalls())  # (a first count, before the crash)
    before = running.listen(5)
    running.tell(probe, Explode(turn_id="t-1"))

    assert before == Calls(0)
    # It handles nothing more: the next ask goes unanswered (its state is suspect).
    assert running.ask(probe, Ping("next"), 0.5) is None
    assert running.ask(probe, CountCalls(), 0.5) is None


def test_without_the_base_thespian_runs_a_raising_handler_again(running: Looped) -> None:
    # The reason the base exists: Thespian redelivers a message whose handler raised (on this
    # base it tries three times), repeating whatever the handler did before it raised.
    plain = running.createActor(PlainActor)

    running.tell(plain, Explode())
    calls = running.ask(plain, CountCalls(), 5)

    assert isinstance(calls, Calls) and calls.count >= 2, calls


def test_system_messages_reach_declared_handlers(running: Looped) -> None:
    probe = running.createActor(ProbeActor)

    woke = running.ask(probe, "wake me", 5)

    assert isinstance(woke, Pong)
    assert woke.text == "woke"


def test_a_watched_descriptor_wakes_the_actor_until_it_is_unwatched(
    running: Looped,
) -> None:
    probe = running.createActor(ProbeActor)

    reply = running.ask(probe, WatchPipe(b"frame bytes"), 5)

    assert reply == Watched(b"frame bytes")
    assert isinstance(running.ask(probe, Ping("after EOF"), 5), Pong)


def test_the_door_logs_what_it_drops_and_what_failed_then_the_actor_exits(
    running: Looped,
) -> None:
    probe = running.createActor(ProbeActor)
    with structlog.testing.capture_logs() as logs:
        running.tell(probe, Stranger("x"))
        running.tell(probe, Explode(turn_id="t-9"))
        running.tell(probe, Ping("after"))
        running.ask(probe, CountCalls(), 0.5)

    events = [(e["event"], e["log_level"]) for e in logs if e.get("actor") == "ProbeActor"]
    # dropped, failed, then the exit it asked itself for (it has no handler for it)
    assert events == [
        ("message_dropped", "warning"),
        ("handler_failed", "error"),
        ("system_message_unhandled", "debug"),
    ]
    dropped, failed = (e for e in logs if e["event"] in ("message_dropped", "handler_failed"))
    assert dropped["message_type"].endswith("messages.Stranger")
    assert failed["message_type"] == "Explode"
    assert failed["crashes"] is True
    assert running.ask(probe, Ping("anyone?"), 0.3) is None  # gone


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
