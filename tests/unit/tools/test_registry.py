"""build_registry and execute_tool: every call is answered, nothing raises, RISKY waits."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import Tier, ToolCall, ToolDefinition
from shelldon.worker.tools import (
    Registry,
    ToolContext,
    ToolSpec,
    build_registry,
    execute_tool,
)

FREE_TOOLS = {"get_time", "read_file", "list_dir", "python_eval"}


@pytest.fixture
def registry(settings: Settings) -> Registry:
    return build_registry(settings)


def call(name: str, args: dict[str, object] | None = None, args_error: str = "") -> ToolCall:
    return ToolCall(id="c1", name=name, args=dict(args or {}), args_error=args_error)


def test_build_registry_offers_the_free_tools(registry: Registry) -> None:
    names = {d.name for d in registry.definitions()}
    assert names >= FREE_TOOLS
    for name in FREE_TOOLS:
        assert registry.tier(name) is Tier.FREE


@pytest.mark.parametrize("name", sorted(FREE_TOOLS))
def test_free_tool_schema_is_a_closed_object(registry: Registry, name: str) -> None:
    schema = registry.specs[name].definition.params_schema
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    assert set(schema.get("required", [])) <= set(schema["properties"])


def test_free_tools_run_through_execute_tool(registry: Registry, home: Path) -> None:
    (home / "workspace" / "hello.txt").write_text("hi")
    assert execute_tool(registry, call("read_file", {"path": "hello.txt"})).content == "hi"
    assert "hello.txt" in execute_tool(registry, call("list_dir", {"path": "."})).content
    assert "hello.txt" in execute_tool(registry, call("list_dir")).content
    assert execute_tool(registry, call("python_eval", {"code": "6 * 7"})).content == "42"
    assert execute_tool(registry, call("get_time")).ok


def test_unknown_tool_is_answered_with_the_available_tools(registry: Registry) -> None:
    result = execute_tool(registry, call("launch_rockets"))
    assert not result.ok
    assert result.id == "c1"
    assert "unknown tool 'launch_rockets'" in result.content
    assert "python_eval" in result.content


def test_arguments_that_were_not_json_are_answered_not_run(registry: Registry) -> None:
    result = execute_tool(registry, call("python_eval", args_error="Expecting value: line 1"))
    assert not result.ok
    assert "not valid JSON" in result.content


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ({}, "missing required argument(s): path"),
        ({"path": "a", "mode": "w"}, "unexpected argument(s): mode"),
        ({"path": 3}, "argument 'path' must be string, got int"),
    ],
)
def test_bad_arguments_are_refused_with_the_problem(
    registry: Registry, args: dict[str, object], problem: str
) -> None:
    result = execute_tool(registry, call("read_file", args))
    assert not result.ok
    assert problem in result.content


def test_a_tool_error_goes_back_as_its_message(registry: Registry) -> None:
    result = execute_tool(registry, call("read_file", {"path": "../etc/passwd"}))
    assert not result.ok
    assert "relative to the workspace" in result.content


def _explode(ctx: ToolContext) -> str:
    raise RuntimeError("kaboom")


def _boom_spec(*, self_coded: bool) -> ToolSpec:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    return ToolSpec(ToolDefinition("boom", "raises", schema), _explode, self_coded=self_coded)


def test_a_tool_that_raises_becomes_a_failed_result(registry: Registry) -> None:
    registry.add(_boom_spec(self_coded=False))
    result = execute_tool(registry, call("boom"))
    assert not result.ok
    assert "RuntimeError: kaboom" in result.content
    assert registry.failures == []


def test_a_self_coded_tool_that_raises_is_recorded_as_a_failure(registry: Registry) -> None:
    registry.add(_boom_spec(self_coded=True))
    execute_tool(registry, call("boom"))
    assert [f.name for f in registry.failures] == ["boom"]


def test_a_self_coded_tool_cannot_shadow_a_builtin(registry: Registry) -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    impostor = ToolSpec(ToolDefinition("get_time", "x", schema), _explode, self_coded=True)
    assert registry.add(impostor) is False
    assert execute_tool(registry, call("get_time")).ok


def test_risky_tool_is_refused_unless_approved(registry: Registry) -> None:
    ran: list[str] = []

    def write_note(ctx: ToolContext, text: str) -> str:
        ran.append(text)
        return "written"

    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    registry.add(ToolSpec(ToolDefinition("write_note", "w", schema, Tier.RISKY), write_note))
    refused = execute_tool(registry, call("write_note", {"text": "x"}))
    assert not refused.ok
    assert "RISKY" in refused.content
    assert ran == []
    approved = execute_tool(registry, call("write_note", {"text": "x"}), approved=True)
    assert approved.ok
    assert ran == ["x"]


def test_tool_output_is_capped_before_it_goes_back(registry: Registry) -> None:
    registry.context = dataclasses.replace(registry.context, max_output_chars=100)
    result = execute_tool(registry, call("python_eval", {"code": "'y' * 1000"}))
    assert result.ok
    assert result.content.startswith("'" + "y" * 99)
    assert len(result.content) < 200


def test_read_file_output_is_capped_by_the_registry(registry: Registry, home: Path) -> None:
    (home / "workspace" / "long.txt").write_text("z" * 50_000)
    result = execute_tool(registry, call("read_file", {"path": "long.txt"}))
    cap = registry.context.max_output_chars
    assert result.content.startswith("z" * cap)
    assert "truncated" in result.content
    assert len(result.content) < cap + 100
