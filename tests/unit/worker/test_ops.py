"""The ops block parser: good lines become contracts and leave the reply; junk is skipped."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from shelldon.contracts import ProposeTool, Remember, Schedule
from shelldon.worker.ops import parse_ops


def at_noon() -> float:
    return 1_700_000_000.0


def test_ops_block_is_stripped_and_returned_as_contracts() -> None:
    text = (
        "Sure, I'll remember that.\n\n"
        "```ops\n"
        '{"op": "remember", "fact": "the cat is called Miso"}\n'
        '{"op": "schedule", "in_s": 3600, "prompt": "water the plants"}\n'
        "```\n"
    )
    parsed = parse_ops(text, clock=at_noon)
    assert parsed.reply == "Sure, I'll remember that."
    assert parsed.ops == (
        Remember("the cat is called Miso"),
        Schedule(at=1_700_003_600.0, prompt="water the plants"),
    )
    assert parsed.problems == ()


def test_schedule_at_an_epoch_is_kept_as_given() -> None:
    parsed = parse_ops('```ops\n{"op":"schedule","at":1767225600,"prompt":"new year"}\n```')
    assert parsed.ops == (Schedule(at=1767225600.0, prompt="new year"),)


def test_a_propose_tool_line_may_name_what_it_replaces() -> None:
    line = '{"op":"propose_tool","name":"shout","code":"c","test":"t","replaces":"shout"}'
    parsed = parse_ops(f"ok\n```ops\n{line}\n```")
    assert parsed.ops == (ProposeTool("shout", "c", "t", replaces="shout"),)
    bad = line.replace('"replaces":"shout"', '"replaces":1')
    refused = parse_ops(f"ok\n```ops\n{bad}\n```")
    assert refused.ops == () and "'replaces' must be a tool's name" in refused.problems[0]


def test_propose_tool_line_becomes_a_proposal() -> None:
    line = '{"op":"propose_tool","name":"shout","code":"def run(**k): return 1","test":"t"}'
    parsed = parse_ops(f"Here you go.\n```ops\n{line}\n```")
    assert parsed.ops == (ProposeTool("shout", "def run(**k): return 1", "t"),)


def test_several_blocks_are_all_read_and_all_stripped() -> None:
    text = (
        "First.\n```ops\n"
        '{"op":"remember","fact":"a"}\n'
        "```\nMiddle.\n```ops\n"
        '{"op":"remember","fact":"b"}\n'
        "```\nLast."
    )
    parsed = parse_ops(text)
    assert parsed.ops == (Remember("a"), Remember("b"))
    assert parsed.reply == "First.\nMiddle.\nLast."


def test_text_without_ops_is_left_alone() -> None:
    text = "Here is code:\n```python\nprint('hi')\n```\nBye."
    parsed = parse_ops(text)
    assert parsed.reply == text and parsed.ops == () and parsed.problems == ()


def test_block_cut_off_by_the_token_limit_is_still_stripped() -> None:
    parsed = parse_ops('Bye!\n```ops\n{"op":"remember","fact":"x"}\n{"op":"remem')
    assert parsed.reply == "Bye!"
    assert parsed.ops == (Remember("x"),)
    assert len(parsed.problems) == 1 and "not JSON" in parsed.problems[0]


def test_blank_lines_inside_a_block_are_ignored() -> None:
    parsed = parse_ops('```ops\n\n  {"op":"remember","fact":"x"}  \n\n```')
    assert parsed.ops == (Remember("x"),) and parsed.problems == ()


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("not json at all", "not JSON"),
        ('["op", "remember"]', "expected a JSON object"),
        ('{"op": "launch_missiles"}', "unknown op 'launch_missiles'"),
        ('{"fact": "no op key"}', "unknown op None"),
        ('{"op": "remember"}', "'fact' must be a non-empty string"),
        ('{"op": "remember", "fact": 42}', "'fact' must be a non-empty string"),
        ('{"op": "remember", "fact": "   "}', "'fact' must be a non-empty string"),
        ('{"op": "schedule", "prompt": "p"}', "exactly one of 'at'"),
        ('{"op": "schedule", "at": 1, "in_s": 2, "prompt": "p"}', "exactly one of 'at'"),
        ('{"op": "schedule", "in_s": "soon", "prompt": "p"}', "'in_s' must be a finite number"),
        ('{"op": "schedule", "in_s": true, "prompt": "p"}', "'in_s' must be a finite number"),
        ('{"op": "schedule", "in_s": NaN, "prompt": "p"}', "'in_s' must be a finite number"),
        ('{"op": "schedule", "in_s": -5, "prompt": "p"}', "must not be negative"),
        ('{"op": "schedule", "at": -1, "prompt": "p"}', "epoch seconds"),
        ('{"op": "schedule", "in_s": 60}', "'prompt' must be a non-empty string"),
        ('{"op": "propose_tool", "name": "x", "code": "c"}', "'test' must be a non-empty"),
        ('{"op": "propose_tool", "name": ["x"], "code": "c", "test": "t"}', "'name' must be"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_malformed_line_is_skipped_and_listed_while_good_lines_survive(
    line: str, problem: str
) -> None:
    text = f'Ok.\n```ops\n{{"op":"remember","fact":"kept"}}\n{line}\n```'
    parsed = parse_ops(text)
    assert parsed.reply == "Ok."
    assert parsed.ops == (Remember("kept"),)
    assert len(parsed.problems) == 1
    assert problem in parsed.problems[0]
    assert parsed.problems[0].startswith("ops block 1, line 2:")


def test_a_bare_opening_fence_at_the_very_end_is_stripped() -> None:
    parsed = parse_ops("Bye!\n```ops")
    assert parsed.reply == "Bye!" and parsed.ops == ()


def test_an_ops_word_inside_prose_is_not_a_block() -> None:
    text = "Use ```ops blocks``` like this, I was told."
    assert parse_ops(text).reply == text


def test_a_skipped_line_is_logged_without_its_content() -> None:
    with capture_logs() as logs:
        parse_ops('```ops\n{"op": "remember", "fact": "sk-secret-looking-thing", "x": \n```')
    skipped = [entry for entry in logs if entry["event"] == "ops_line_skipped"]
    assert len(skipped) == 1 and skipped[0]["log_level"] == "warning"
    assert "sk-secret-looking-thing" not in str(skipped[0])
