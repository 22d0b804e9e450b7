"""Tool calls and results are paired before any wire format is built."""

from __future__ import annotations

from shelldon.broker.transcript import UNANSWERED, pair_tool_results
from shelldon.contracts import Message, Role, ToolCall

CALLS = (ToolCall("a", "clock", {}), ToolCall("b", "clock", {}))


def result(call_id: str, text: str = "r") -> Message:
    return Message(Role.TOOL, text, tool_call_id=call_id)


def test_a_complete_transcript_is_unchanged() -> None:
    messages = (
        Message(Role.USER, "hi"),
        Message(Role.ASSISTANT, "", CALLS),
        result("b"),
        result("a"),
        Message(Role.ASSISTANT, "done"),
    )
    assert pair_tool_results(messages) == messages


def test_an_unanswered_call_gets_an_error_result() -> None:
    messages = (Message(Role.USER, "hi"), Message(Role.ASSISTANT, "", CALLS), result("a"))
    paired = pair_tool_results(messages)
    assert paired[-1] == Message(Role.TOOL, UNANSWERED, tool_call_id="b", is_error=True)
    assert len(paired) == 4


def test_a_result_answering_no_call_is_dropped() -> None:
    messages = (Message(Role.USER, "hi"), result("ghost"), Message(Role.ASSISTANT, "ok"))
    assert pair_tool_results(messages) == (messages[0], messages[2])


def test_a_result_for_a_call_of_another_message_is_dropped() -> None:
    messages = (
        Message(Role.ASSISTANT, "", (CALLS[0],)),
        result("a"),
        Message(Role.USER, "more"),
        result("a", "late duplicate"),
    )
    assert pair_tool_results(messages) == messages[:3]


def test_a_call_answered_twice_keeps_the_first_answer() -> None:
    messages = (Message(Role.ASSISTANT, "", (CALLS[0],)), result("a", "1"), result("a", "2"))
    assert pair_tool_results(messages) == messages[:2]
