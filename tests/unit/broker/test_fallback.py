"""The switch to the fallback provider, decided apart from any network: which failures switch,
for how long, and that the fallback is neither built nor asked when it should not be."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from shelldon.broker.fallback import SWITCH_KINDS, Failover, fallback_note
from shelldon.broker.provider import KINDS, ProviderError
from shelldon.contracts import Completion, Job, Message, Photo, Role, ToolDefinition, Usage

MAIN = ("anthropic", "claude-x")
SPARE = ("openai", "gpt-y")


class Stub:
    """A provider that raises its queued errors, then answers ``text``."""

    def __init__(self, text: str, *errors: ProviderError) -> None:
        self.text = text
        self.errors = list(errors)
        self.calls = 0
        self.closed = False

    async def complete(self, messages: Sequence[Message]) -> str:
        raise NotImplementedError

    async def complete_with_tools(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *, deadline: float
    ) -> Completion:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return Completion(self.text, usage=Usage(3, 2))

    async def aclose(self) -> None:
        self.closed = True


def job(turn: str = "t1", deadline: float | None = None) -> Job:
    when = time.monotonic() + 20 if deadline is None else deadline
    return Job(turn, (Message(Role.USER, "hi"),), (), when)


def failover(main: Stub, spare: Stub | None) -> tuple[Failover, list[Stub]]:
    built: list[Stub] = []

    def make() -> Stub:
        assert spare is not None
        built.append(spare)
        return spare

    return Failover(main, MAIN, make if spare else None, SPARE), built


def test_every_failure_but_a_bad_request_switches() -> None:
    # The request itself (400, 404 model, 413) would be asked of the fallback the same way.
    assert set(KINDS - SWITCH_KINDS) == {"bad_request"}


@pytest.mark.parametrize("kind", sorted(SWITCH_KINDS))
def test_the_fallback_answers_when_the_main_fails_so(kind: str) -> None:
    main, spare = Stub("main"), Stub("spare")
    main.errors.append(ProviderError(kind, "no"))
    brain, _ = failover(main, spare)
    answered = asyncio.run(brain.answer(job()))
    assert answered.completion.text == "spare"
    assert (answered.provider, answered.model) == SPARE
    assert answered.note == fallback_note(SPARE, "anthropic", kind)
    assert answered.note.startswith("↪ Answered by the fallback, openai gpt-y: anthropic ")


def test_a_bad_request_never_reaches_the_fallback() -> None:
    main, spare = Stub("main", ProviderError("bad_request", "invalid")), Stub("spare")
    brain, built = failover(main, spare)
    with pytest.raises(ProviderError, match="invalid"):
        asyncio.run(brain.answer(job()))
    assert built == [] and spare.calls == 0


def test_the_main_answering_carries_no_note() -> None:
    brain, built = failover(Stub("main"), Stub("spare"))
    answered = asyncio.run(brain.answer(job()))
    assert (answered.completion.text, answered.provider, answered.note) == ("main", "anthropic", "")
    assert built == []  # the fallback is built at its first use, not before


def test_the_rest_of_the_turn_skips_the_main_and_the_next_turn_tries_it_again() -> None:
    main, spare = Stub("main", ProviderError("overloaded", "529")), Stub("spare")
    brain, built = failover(main, spare)
    first = job("t1")

    async def turns() -> list[str]:
        said = [(await brain.answer(first)).provider]
        said.append((await brain.answer(first)).provider)  # the same run: straight to the spare
        said.append((await brain.answer(job("t2"))).provider)  # the next turn: main again
        return said

    assert asyncio.run(turns()) == ["openai", "openai", "anthropic"]
    assert main.calls == 2 and spare.calls == 2 and len(built) == 1


def test_no_time_left_in_the_turn_means_no_fallback_call() -> None:
    main, spare = Stub("main", ProviderError("timeout", "hung until the deadline")), Stub("s")
    brain, built = failover(main, spare)
    with pytest.raises(ProviderError, match="hung until the deadline"):
        asyncio.run(brain.answer(job(deadline=time.monotonic() - 1)))
    assert built == [] and spare.calls == 0


def test_when_both_fail_the_error_names_both() -> None:
    main = Stub("main", ProviderError("unreachable", "main is down"))
    spare = Stub("spare", ProviderError("quota", "spare is out of credit"))
    brain, _ = failover(main, spare)
    with pytest.raises(ProviderError) as caught:
        asyncio.run(brain.answer(job()))
    assert caught.value.kind == "quota"
    assert "spare is out of credit" in caught.value.message
    assert "main is down" in caught.value.message


def test_without_a_fallback_the_main_error_stands() -> None:
    brain, _ = failover(Stub("main", ProviderError("overloaded", "529")), None)
    with pytest.raises(ProviderError, match="529"):
        asyncio.run(brain.answer(job()))


def test_closing_closes_both_providers_once_built() -> None:
    main, spare = Stub("main", ProviderError("server", "500")), Stub("spare")
    brain, _ = failover(main, spare)
    asyncio.run(brain.answer(job()))
    asyncio.run(brain.aclose())
    assert main.closed and spare.closed


class Seeing(Stub):
    """A stub that keeps the messages it was asked with."""

    def __init__(self, text: str, *errors: ProviderError) -> None:
        super().__init__(text, *errors)
        self.asked: list[Sequence[Message]] = []

    async def complete_with_tools(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *, deadline: float
    ) -> Completion:
        self.asked.append(messages)
        return await super().complete_with_tools(messages, tools, deadline=deadline)


@pytest.mark.parametrize("sees", [True, False])
def test_a_photo_reaches_a_fallback_only_if_its_model_sees(sees: bool) -> None:
    photo = Photo("k1", "image/jpeg", 640, 480, 1000, base64="/9j/AAAA")
    turn = Job("t1", (Message(Role.USER, "[photo 640×480, 1 KB] what?", photo=photo),), (), 1e12)
    main, spare = Seeing("main", ProviderError("overloaded", "busy")), Seeing("spare")
    brain = Failover(main, MAIN, lambda: spare, SPARE, fallback_sees=sees)
    assert asyncio.run(brain.answer(turn)).completion.text == "spare"
    assert main.asked[0][0].photo == photo  # the main sees it either way
    (sent,) = spare.asked[0]
    if sees:
        assert sent.photo == photo
    else:
        assert sent.photo is None
        assert sent.content.startswith("[photo 640×480, 1 KB] what?")
        assert "cannot see images" in sent.content
