"""Turns through the installed service: the fake Bot API in front, the fake LLM behind."""

from __future__ import annotations

import json

import pytest

from shelldon.worker.prompt import CATALOGUE_INTRO
from tests.system.rig import GATE_S, TURN_S, WORKSPACE, Pet, events, journal, sh, wait_until

WORD_COUNT = """\
DESCRIPTION = "Count the words in a text."
PARAMS_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
}


def run(text):
    return str(len(text.split()))
"""
WORD_COUNT_TEST = """\
from word_count import run


def test_counts_words():
    assert run("one two three") == "3"
"""


def tool_results(pet: Pet, since: int) -> list[str]:
    """What the tools answered, as the model saw it in the requests since ``since``."""
    found = []
    for request in pet.brain.requests_since(since):
        for message in pet.brain.conversation(request):
            if message.get("role") == "tool":
                found.append(str(message.get("content")))
    return found


@pytest.mark.smoke
def test_a_turn_is_answered(pet: Pet) -> None:
    asked = len(pet.brain.requests)
    reply = pet.turn("hello shelldon, are you there?", "Hello! I live on a Pi.")
    assert reply == "Hello! I live on a Pi."
    requests = pet.brain.requests_since(asked)
    assert len(requests) == 1, [r.json() for r in requests]
    said = [m for m in pet.brain.conversation(requests[0]) if m.get("role") == "user"]
    assert "hello shelldon, are you there?" in json.dumps(said)
    # Keyless on loopback: no Authorization header was sent, so no key to leak.
    assert "Authorization" not in requests[0].headers
    assert pet.brain.rejections == []


def test_a_risky_call_waits_for_the_owners_tap_then_runs(pet: Pet) -> None:
    target = WORKSPACE / "approved-note.txt"
    target.unlink(missing_ok=True)
    pet.brain.reply_tool_calls(
        ("write_file", {"path": "approved-note.txt", "content": "written after a tap\n"})
    )
    pet.brain.reply_text("Saved your note.")
    mark = pet.bot.say("save a note for me")
    ask = pet.bot.wait_keyboard(since=mark)
    assert "write_file" in ask.visible and "approved-note.txt" in ask.visible, ask.visible
    assert "written after a tap" in ask.visible
    assert not target.exists()  # parked: nothing ran before the tap
    query = pet.bot.tap(ask, 0)
    pet.bot.wait_text("Saved your note.", since=mark)
    assert target.read_text() == "written after a tap\n"
    assert sh("stat", "-c", "%U", str(target)).stdout.strip() == "shelldon"
    wait_until(lambda: pet.bot.answered(query), TURN_S, "the tap to be answered")
    decided = pet.bot.fake.message(ask.chat_id, ask.message_id)
    assert not decided.buttons() and "Approved" in decided.visible, decided.visible


@pytest.mark.smoke
def test_a_self_coded_tool_is_gated_in_the_service_and_used_next_turn(pet: Pet) -> None:
    asked, decided = pet.promote_tool("word_count", WORD_COUNT, WORD_COUNT_TEST)
    assert not decided.buttons()
    # The gate ran the test with real pytest inside the service, and the owner was told so.
    assert "passed: 1 test(s)" in asked, asked
    finished = [e for e in events(journal(), "gate_finished") if e.get("tool") == "word_count"]
    assert finished and finished[-1]["passed"] is True, finished
    # The next turn sees it and uses it.
    asked = len(pet.brain.requests)
    pet.brain.reply_tool_calls(("word_count", {"text": "the quick brown fox jumps"}))
    pet.brain.reply_text("That is five words.")
    mark = pet.bot.say("how many words in: the quick brown fox jumps")
    pet.bot.wait_text("That is five words.", since=mark, timeout=GATE_S)
    first = pet.brain.requests_since(asked)[0].json()
    offered = [t["function"]["name"] for t in first.get("tools", [])]
    system = next(m["content"] for m in first["messages"] if m["role"] == "system")
    # Listed in the catalogue (a line in the system prompt), loadable in full with
    # describe_tools; called without loading it, it is checked against its schema and run.
    assert "describe_tools" in offered, offered
    catalogue = system.split(CATALOGUE_INTRO, 1)[-1]
    assert any(line.startswith("word_count") for line in catalogue.splitlines()), system
    results = tool_results(pet, asked)
    # The model reads the tool's answer wrapped as data: <tool_output tool="word_count">5</…>
    assert results and results[-1].split(">", 1)[-1].split("<", 1)[0].strip() == "5", results
