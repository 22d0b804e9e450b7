"""The console transport's logic: prompts answered by the next line, the demo story's pacing."""

from __future__ import annotations

from shelldon.contracts import Decision, InboundMessage
from shelldon.transport.console import ConsoleSession, format_reply


def test_a_line_answers_the_oldest_prompt_and_only_yes_approves() -> None:
    s = ConsoleSession()
    s.ask("t1", promotion=False)
    s.ask("t2", promotion=True)
    assert s.line_event("y") == Decision(0, 0, "t1", True)
    assert s.line_event("nope") == Decision(0, 0, "t2", False)
    assert s.line_event("hello") == InboundMessage(0, 0, "hello")
    assert s.line_event("   ") is None


def test_auto_yes_answers_at_once() -> None:
    assert ConsoleSession(auto_yes=True).ask("t1", promotion=False) == Decision(0, 0, "t1", True)


def test_the_story_waits_for_a_promotion_when_told_to() -> None:
    s = ConsoleSession(story=(("make a tool", True), ("use it", False)))
    assert s.next_story_line() == "make a tool"
    assert not s.on_idle()  # the turn ended, but the promotion is still to come
    assert not s.on_settled(promotion=False)
    assert s.on_settled(promotion=True)
    assert s.next_story_line() == "use it"
    assert s.on_idle()
    assert s.next_story_line() is None and s.finished


def test_multiline_replies_stay_indented() -> None:
    assert format_reply("a\nb") == "shelldon › a\n           b\n"
