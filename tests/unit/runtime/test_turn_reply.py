"""What the owner reads when a turn ends: the model's Markdown, then the pet's own words."""

from __future__ import annotations

from shelldon.contracts import Remember, RequestToolApproval, Schedule, ToolCall, ToolFailure
from shelldon.replies import describe_call
from shelldon.rules.replies import approval_question
from shelldon.rules.turn_reply import MEMORY_NOTE, TurnReply, one_line, turn_reply

SHELL = ToolCall("c1", "run_shell", {"command": "ls a*b*c && python -c 'print(2**10 + 3**2)'"})
QUESTION = approval_question(describe_call(SHELL))


def test_a_plain_reply_is_all_the_models_markdown() -> None:
    assert turn_reply("**Done.**", ()) == TurnReply("**Done.**", len("**Done.**"))


def test_a_stored_fact_is_told_in_the_pets_words_after_the_reply() -> None:
    said = turn_reply("Noted!", (Remember("the cat is *Miso*"), Schedule(1.0, "x")))
    assert said.text == "Noted!\n\n📝 I'll remember: the cat is *Miso*"
    assert said.text[said.markdown_chars :] == "\n\n📝 I'll remember: the cat is *Miso*"


def test_each_fact_is_told_once_even_with_no_reply() -> None:
    said = turn_reply("", (Remember("a"), Remember("b"), Remember("a")))
    assert said == TurnReply("📝 I'll remember: a\n\n📝 I'll remember: b", 0)


def test_a_parked_calls_question_is_literal_so_markdown_cannot_restyle_the_command() -> None:
    parked = RequestToolApproval(SHELL, "summary", ())
    said = turn_reply(f"Let me look.\n\n{QUESTION}", (parked,))
    assert said.text[: said.markdown_chars] == "Let me look."
    assert said.text.endswith(QUESTION) and QUESTION not in said.text[: said.markdown_chars]


def test_a_worker_that_asks_in_other_words_gets_no_literal_tail() -> None:
    # The question is the parent's own words; anything else is the model's text, as Markdown.
    parked = RequestToolApproval(SHELL, "summary", ())
    said = turn_reply("May I run something harmless?", (parked,))
    assert said == TurnReply("May I run something harmless?", len(said.text))


def test_a_fact_cannot_pose_as_more_of_the_pets_lines() -> None:
    fact = "likes tea\n\nI'd like to run get_time() — approve?"
    said = turn_reply("Ok.", (Remember(fact),))
    assert said.text.split("\n") == [
        "Ok.",
        "",
        "📝 I'll remember: likes tea ↵ I'd like to run get_time() — approve?",
    ]
    assert one_line("a\u2028b\rc") == "a ↵ b ↵ c" and one_line("plain") == "plain"


def test_a_tool_that_ran_out_of_memory_is_told_once_whatever_the_model_said() -> None:
    failures = (
        ToolFailure("hog", "MemoryError: ", "c1"),
        ToolFailure("hog", "MemoryError: ", "c2"),
        ToolFailure("adder", "ValueError: no", "c3"),
    )
    said = turn_reply("All done!", (), failures)
    assert said.text == f"All done!\n\n{MEMORY_NOTE.format(name='hog')}"
    assert said.markdown_chars == len("All done!")


def test_the_fallbacks_note_is_the_pets_own_words_after_the_reply() -> None:
    note = "↪ Answered by the fallback, openai gpt-4o-mini: anthropic was overloaded."
    said = turn_reply("**Hi.**", (Remember("a"),), (), note)
    assert said.text == f"**Hi.**\n\n📝 I'll remember: a\n\n{note}"
    assert said.markdown_chars == len("**Hi.**")
