"""The console transport's logic: prompts answered by the next line, the demo story's pacing."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelldon.contracts import Decision, InboundMessage, RequestToolApproval, ToolCall, encode
from shelldon.store import Store
from shelldon.transport.console import (
    STEP_SLACK_S,
    AskAgain,
    ConsoleSession,
    Prompt,
    ask_again_text,
    format_approval,
    format_gate,
    format_reply,
    format_you,
    reopen_parked,
    story_step_budget_s,
)


def test_a_line_answers_the_oldest_prompt_and_only_yes_approves() -> None:
    s = ConsoleSession()
    s.ask("t1", promotion=False)
    s.ask("t2", promotion=True)
    assert s.line_event("y") == Decision(0, 0, "t1", True)
    assert s.line_event(" NO ") == Decision(0, 0, "t2", False)
    assert s.line_event("hello") == InboundMessage(0, 0, "hello")
    assert s.line_event("   ") is None


@pytest.mark.parametrize("line", ["nope", "ok", "sure", "", "  ", "please save the note", "yess"])
def test_only_y_yes_n_no_decide_anything_else_is_asked_again(line: str) -> None:
    # Issue 20: a chat message typed at the prompt was taken as a denial and lost.
    s = ConsoleSession()
    s.ask("t1", promotion=False, what='write_file(path="x")')
    again = s.line_event(line)
    assert isinstance(again, AskAgain) and again.prompt.turn_id == "t1"
    assert [p.turn_id for p in s.prompts] == ["t1"]  # still open
    text = ask_again_text(again)
    assert 'write_file(path="x")' in text and "not sent" in text
    assert s.line_event("Yes") == Decision(0, 0, "t1", True)


def test_a_prompt_decided_elsewhere_or_expired_is_forgotten() -> None:
    s = ConsoleSession()
    s.ask("t1", promotion=False)
    s.ask("t2", promotion=False)
    s.forget("t1")
    s.forget("t1")  # twice: nothing else goes
    assert s.line_event("n") == Decision(0, 0, "t2", False)


def test_the_end_of_input_leaves_a_reopened_prompt_parked() -> None:
    s = ConsoleSession()
    s.reopen(Prompt("t-old", False, "x"))
    s.ask("t-new", promotion=False)
    assert s.close_input() == [Decision(0, 0, "t-new", False)]


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


DEMO = (("time?", False), ("save a note", False), ("make a tool", True), ("use it", False))


def test_a_no_ends_the_story_with_a_reason() -> None:
    s = ConsoleSession(story=DEMO)
    s.next_story_line()
    s.on_idle()
    assert s.next_story_line() == "save a note"
    assert not s.on_settled(promotion=False, approved=False)
    assert s.failure.startswith("the demo stopped at step 2: you said no")
    assert s.next_story_line() is None  # nothing more is told


def test_refusing_the_promotion_ends_the_story() -> None:
    s = ConsoleSession(story=DEMO[2:])
    s.next_story_line()
    s.on_idle()
    assert not s.on_settled(promotion=True, approved=False)
    assert "you said no to adding the tool" in s.failure


def test_a_tool_that_fails_its_gate_ends_the_story_only_where_a_promotion_was_due() -> None:
    s = ConsoleSession(story=DEMO)
    s.next_story_line()
    assert not s.on_tool_refused()  # step 1 waits for no tool: a stray refusal changes nothing
    assert not s.failure
    s.on_idle()
    s.next_story_line()
    s.on_idle()
    s.next_story_line()  # "make a tool"
    assert s.on_tool_refused()
    assert s.failure == (
        "the demo stopped at step 3: the tool I wrote did not pass its gate "
        "(my reply above says why)"
    )
    assert not s.on_tool_refused()  # said once


def test_an_overdue_step_ends_the_story_unless_the_owner_is_being_asked() -> None:
    s = ConsoleSession(story=DEMO)
    s.next_story_line()
    s.ask("t1", promotion=False)
    assert not s.on_step_overdue(1, 110)  # a person may take their time at [y/N]
    s.line_event("y")
    assert not s.on_step_overdue(2, 110)  # a wake-up for another step
    assert s.on_step_overdue(1, 110)
    assert s.failure == "the demo stopped at step 1: 'time?' got no answer within 110 s"


def test_a_finished_step_is_never_overdue() -> None:
    s = ConsoleSession(story=DEMO)
    s.next_story_line()
    s.on_idle()
    assert not s.on_step_overdue(1, 110)


def test_each_step_is_bounded_by_its_ceilings() -> None:
    assert story_step_budget_s(25, 30) == 2 * 25 + 30 + STEP_SLACK_S


def test_chat_sessions_have_no_story_to_stop() -> None:
    s = ConsoleSession()
    assert not s.on_settled(promotion=False, approved=False)
    assert not s.on_tool_refused()
    assert not s.failure


# --- what reaches the terminal (issue 18): controls escaped, the call shown whole ------------


def test_escape_sequences_in_a_model_reply_never_reach_the_terminal_raw() -> None:
    hostile = "done\x1b]0;owned\x07\x1b[2J\x1b[1A\rtotally safe\x9b1m\u202e"
    for shown in (format_reply(hostile), format_gate(hostile), format_you(hostile)):
        assert not any(ch in shown for ch in "\x1b\x07\r\x9b\u202e"), shown
        assert "⟦U+001B⟧]0;owned⟦U+0007⟧" in shown


def test_the_console_shows_an_approval_whole_with_the_same_warnings_as_the_card() -> None:
    content = "".join(f"row {i}\n" for i in range(3000)) + "end\u202e\x1b[2J\n"
    call = ToolCall("c", "write_file", {"path": "big.txt", "content": content})
    shown = format_approval(call)
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "↳ write_file" in shown and "path: big.txt" in shown
    assert "row 0" in shown and "row 2999" in shown  # nothing cut
    assert "end⟦U+202E⟧⟦U+001B⟧[2J" in shown
    assert "U+202E RIGHT-TO-LEFT OVERRIDE (line 3001, column 4)" in shown
    url_call = ToolCall("c", "http_get", {"url": "https://g\u043e\u043egle.com/"})
    assert "it is xn--ggle-55da.com" in format_approval(url_call)


def test_what_an_earlier_session_left_parked_is_reopened_as_it_was_asked(tmp_path: Path) -> None:
    call = ToolCall("c1", "run_shell", {"command": "ls\x1b[2J"})
    with Store(tmp_path / "db") as store:
        op = RequestToolApproval(call, "the worker's own words", ())
        store.parked.park_approval("t1", 0, encode(op), "run_shell(...)", now=0, ttl_s=999)
        store.parked.park_approval("t-junk", 0, b"\xc1junk", "run_shell(?)", now=1, ttl_s=999)
        store.parked.park_promotion(
            "p1", 0, "shout", "h", "tool shout", now=2, ttl_s=999, code=b"x=1"
        )
        store.parked.park_approval("t-tg", 1001, encode(op), "run_shell(...)", now=3, ttl_s=999)
        reopened = reopen_parked(store, now=600)
    assert [r.prompt.turn_id for r in reopened] == ["t1", "t-junk", "p1"]  # not Telegram's
    first, junk, promotion = reopened
    assert first.prompt == Prompt("t1", False, 'run_shell(command="ls\\u001b[2J")')
    assert "Still waiting for your answer from 10 min ago" in first.shown
    assert "↳ run_shell" in first.shown and "\x1b" not in first.shown  # shown, never obeyed
    assert "worker's own words" not in first.shown  # the parent's words, never the worker's
    assert "run_shell(?)" in junk.shown
    assert promotion.prompt.promotion and "shout" in promotion.shown and "x=1" in promotion.shown
