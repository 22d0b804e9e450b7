"""The compact catalogue of self-coded tools and ``describe_tools``, which loads them in full.

A growing toolbox must not grow the bill: every model call carries its tools list, so N live
self-coded tools would cost N descriptions and JSON schemas a call. Instead a Job offers the
built-ins in full plus ``describe_tools``, and the system prompt names each self-coded tool in
one short line (``catalogue_text``). Describing tools, or calling one directly (its arguments
are still checked against its real schema), offers them in full for the rest of the turn; that
set is read back from the messages (``loaded_in``), so a parked and resumed turn keeps it.

The model's arguments are hostile: ``describe_tools`` ignores what is not a string, loads only
names of live self-coded tools, at most ``MAX_DESCRIBE`` per call, and names the rest briefly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from shelldon.contracts import Message, Role, Tier, ToolCall, ToolDefinition, ToolResult
from shelldon.worker.tools import cap_output

DESCRIBE_TOOLS = ToolDefinition(
    name="describe_tools",
    description=(
        "Load the full definitions of your own tools listed in the system prompt, so you can "
        "call them. Give their exact names."
    ),
    params_schema={
        "type": "object",
        "properties": {"names": {"type": "array", "items": {"type": "string"}}},
        "required": ["names"],
        "additionalProperties": False,
    },
    tier=Tier.FREE,
)
"""FREE and run by the loop itself; offered whenever the turn has self-coded tools."""

MAX_DESCRIBE = 8
"""Definitions one ``describe_tools`` call loads: a bound on one result's size."""

CATALOGUE_CHARS = 1600
"""The catalogue's budget for one-line summaries: with many tools each line shrinks, down to
the bare name (names are never cut: a tool must stay reachable)."""

SUMMARY_CHARS = 60
"""The longest summary, however few the tools."""

_SHOWN = 5  # rejected names quoted back, each clipped: a hostile list is not echoed whole
_NAME_CLIP = 40


def summary(description: str, width: int) -> str:
    """The first line of ``description``, cut at a word boundary to at most ``width`` chars."""
    line = " ".join(description.strip().split("\n", 1)[0].split())
    if len(line) <= width:
        return line
    cut = line[: width + 1].rsplit(" ", 1)[0] if " " in line[:width] else line[:width]
    return cut[:width].rstrip(" ,;:.")


# The last catalogue built: a worker forked after its parent discovered gets the very same
# definition objects every turn, so an identity check spares rebuilding hundreds of lines.
_last: tuple[tuple[ToolDefinition, ...], str] = ((), "")


def catalogue_text(tools: Sequence[ToolDefinition]) -> str:
    """One line per tool, ``name: summary``, the summaries sharing ``CATALOGUE_CHARS``."""
    global _last  # noqa: PLW0603 - the one-entry cache described above
    if not tools:
        return ""
    seen, text = _last
    if len(seen) == len(tools) and all(a is b for a, b in zip(seen, tools, strict=True)):
        return text
    share = min(SUMMARY_CHARS, CATALOGUE_CHARS // len(tools))
    lines = []
    for tool in tools:
        width = share - len(tool.name) - 2
        line = summary(tool.description, width) if width >= 8 else ""
        lines.append(f"{tool.name}: {line}" if line else tool.name)
    text = "\n".join(lines)
    _last = (tuple(tools), text)
    return text


def _clip(value: object) -> str:
    text = value if isinstance(value, str) else type(value).__name__
    return text if len(text) <= _NAME_CLIP else text[:_NAME_CLIP] + "…"


def accepted(call: ToolCall, known: Sequence[ToolDefinition]) -> tuple[list[str], list[str]]:
    """The names a ``describe_tools`` call loads (live self-coded ones, at most
    ``MAX_DESCRIBE``, first come first served) and what to say about the rest."""
    names: Any = call.args.get("names") if not call.args_error else None
    if isinstance(names, str):
        names = [names]  # a lone name is forgiven: models often send one
    if not isinstance(names, list | tuple):
        return [], ["`names` must be a list of tool names from the catalogue"]
    by_name = {tool.name for tool in known}
    loaded: list[str] = []
    unknown: list[object] = []
    over: list[str] = []
    for name in names:
        if not isinstance(name, str) or name not in by_name:
            unknown.append(name)
        elif name in loaded:
            continue
        elif len(loaded) < MAX_DESCRIBE:
            loaded.append(name)
        else:
            over.append(name)
    notes = []
    if unknown:
        notes.append(f"not in your catalogue: {_listed([_clip(n) for n in unknown])}")
    if over:
        notes.append(f"not loaded (at most {MAX_DESCRIBE} per call; ask again): {_listed(over)}")
    return loaded, notes


def _listed(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def definition_text(tool: ToolDefinition) -> str:
    """A tool's full definition as the model reads it in a result."""
    schema = json.dumps(tool.params_schema, sort_keys=True)
    return f"{tool.name}: {tool.description}\nparameters (JSON schema): {schema}"


def describe(
    call: ToolCall, known: Sequence[ToolDefinition], limit: int
) -> tuple[ToolResult, list[str]]:
    """Answer a ``describe_tools`` call: the definitions it loads, capped at ``limit`` chars,
    and the names now offered in full."""
    if call.args_error:
        return ToolResult(call.id, False, f"arguments were not valid JSON: {call.args_error}"), []
    if not known:
        return ToolResult(call.id, False, "you have no self-coded tools yet"), []
    loaded, notes = accepted(call, known)
    by_name = {tool.name: tool for tool in known}
    parts = [definition_text(by_name[name]) for name in loaded]
    if loaded:
        parts.append(f"now callable for the rest of this turn: {', '.join(loaded)}")
    parts.extend(notes)
    return ToolResult(call.id, bool(loaded), cap_output("\n\n".join(parts), limit)), loaded


def loaded_in(messages: Sequence[Message], known: Sequence[ToolDefinition]) -> set[str]:
    """The self-coded tools a turn's messages loaded: described or called (a parked turn's
    messages give its resume the same set)."""
    names = {tool.name for tool in known}
    loaded: set[str] = set()
    for message in messages:
        if message.role is not Role.ASSISTANT:
            continue
        for call in message.tool_calls:
            if call.name == DESCRIBE_TOOLS.name:
                loaded.update(accepted(call, known)[0])
            elif call.name in names:
                loaded.add(call.name)
    return loaded
