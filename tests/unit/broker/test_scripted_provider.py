"""The scripted brain: replays steps in order or by ``when``, and never fails for lack of one."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from shelldon.broker.provider import Provider, ProviderError
from shelldon.broker.scripted_provider import (
    ScriptedProvider,
    ScriptError,
    load_script,
    parse_script,
)
from shelldon.contracts import Completion, Message, Role, ToolCall


def ask(provider: ScriptedProvider, *texts: str, deadline: float | None = None) -> Completion:
    messages = [Message(Role.SYSTEM, "persona"), *(Message(Role.USER, t) for t in texts)]
    limit = time.monotonic() + 5 if deadline is None else deadline
    return asyncio.run(provider.complete_with_tools(messages, (), deadline=limit))


def test_it_is_a_provider() -> None:
    assert isinstance(ScriptedProvider(), Provider)


def test_without_a_script_it_answers_kindly() -> None:
    completion = ask(ScriptedProvider(), "hello   there")
    assert "scripted brain" in completion.text
    assert "hello there" in completion.text
    assert completion.tool_calls == ()


def test_steps_without_when_play_in_order_then_the_default() -> None:
    provider = ScriptedProvider(parse_script([{"text": "one"}, {"text": "two"}]))
    assert [ask(provider, "x").text for _ in range(2)] == ["one", "two"]
    assert "nothing scripted" in ask(provider, "x").text


def test_when_picks_the_step_matching_the_last_user_text() -> None:
    provider = ScriptedProvider(
        parse_script([{"text": "plain"}, {"when": "Weather", "text": "sunny"}])
    )
    assert ask(provider, "what's the weather?").text == "sunny"
    assert ask(provider, "what's the weather?").text == "plain"


def test_a_tool_loop_moves_on_because_steps_are_used_up() -> None:
    provider = ScriptedProvider(
        parse_script(
            [
                {
                    "when": "time",
                    "tool_calls": [{"name": "clock"}, {"name": "x", "args": {"a": 1}}],
                },
                {"when": "time", "text": "It is noon."},
            ]
        )
    )
    first = ask(provider, "what time is it")
    assert first.tool_calls == (
        ToolCall("script_1", "clock", {}),
        ToolCall("script_2", "x", {"a": 1}),
    )
    messages = [
        Message(Role.USER, "what time is it"),
        Message(Role.ASSISTANT, "", first.tool_calls),
        Message(Role.TOOL, "12:00", tool_call_id="script_1"),
    ]
    second = asyncio.run(provider.complete_with_tools(messages, (), deadline=time.monotonic() + 5))
    assert second.text == "It is noon."
    assert provider.requests[-1][0] == tuple(messages)


def test_named_ids_and_truncation_are_kept() -> None:
    provider = ScriptedProvider(
        parse_script(
            [{"tool_calls": [{"name": "a", "id": "mine"}]}, {"text": "cut", "truncated": True}]
        )
    )
    assert ask(provider, "x").tool_calls[0].id == "mine"
    assert ask(provider, "x").truncated


def test_a_step_may_say_something_alongside_its_tool_calls() -> None:
    provider = ScriptedProvider(
        parse_script([{"text": "Saving it.", "tool_calls": [{"name": "write_file"}]}])
    )
    answer = ask(provider, "x")
    assert answer.text == "Saving it." and [c.name for c in answer.tool_calls] == ["write_file"]


def test_a_passed_deadline_is_a_timeout() -> None:
    with pytest.raises(ProviderError) as caught:
        ask(ScriptedProvider(), "x", deadline=time.monotonic() - 1)
    assert caught.value.kind == "timeout"


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ({"text": "x"}, "must be a JSON list"),
        (["x"], "step 0: must be an object"),
        ([{}], "needs 'text', 'tool_calls' or both"),
        ([{"txet": "typo"}], "unknown keys ['txet']"),
        ([{"text": 3}], "'text' must be a string"),
        ([{"text": "a", "when": 1}], "'when' must be a string"),
        ([{"text": "a", "truncated": "yes"}], "'truncated' must be true or false"),
        ([{"tool_calls": []}], "non-empty list"),
        ([{"tool_calls": [{"args": {}}]}], "'name' must be a non-empty string"),
        ([{"tool_calls": [{"name": "a", "args": []}]}], "'args' must be an object"),
        ([{"tool_calls": [{"name": "a", "agrs": {}}]}], "unknown keys ['agrs']"),
    ],
)
def test_bad_scripts_are_refused_naming_the_step(data: object, problem: str) -> None:
    with pytest.raises(ScriptError, match=None) as caught:
        parse_script(data)
    assert problem in str(caught.value)


def test_a_script_file_is_loaded(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([{"text": "from file"}]))
    assert ask(ScriptedProvider(load_script(path)), "x").text == "from file"


def test_missing_or_broken_script_files_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="does not exist"):
        load_script(tmp_path / "absent.json")
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(ScriptError, match="not valid JSON"):
        load_script(broken)
