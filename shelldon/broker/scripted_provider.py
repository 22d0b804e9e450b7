"""An offline brain that replays a script: the demo's brain and the tests' brain.

The script is a JSON file (``[brain] script``) holding a list of steps. Each step is one model
answer: text, tool calls, or both (text said alongside the calls, as real models do),
optionally guarded by ``when``::

    [
      {"when": "weather", "tool_calls": [{"name": "http_get", "args": {"url": "http://x"}}]},
      {"when": "weather", "text": "It is sunny."},
      {"text": "Hello! I am shelldon."},
      {"text": "This answer was cut short.", "truncated": true}
    ]

Each call uses up one step: the first unused step whose ``when`` occurs (case-insensitively) in
the last user message's text, else the first unused step without ``when``. So steps without
``when`` play in order, and a tool loop moves on because its first step is used up. A tool call
may name its ``id``; otherwise ids are ``script_1``, ``script_2``, ... When no step is left (or
no script is configured) the brain answers with a friendly default reply instead of failing.
A step's text may say ``{last_tool_result}``: it becomes the latest tool result the model saw,
so a scripted story can show what a tool really returned.
Unknown keys are refused (``ScriptError``) so a typo does not silently change the story.
"""

from __future__ import annotations

import collections
import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.broker.provider import ProviderError
from shelldon.contracts import Completion, Message, Role, ToolCall, ToolDefinition, Usage

log = structlog.get_logger(__name__)

STEP_KEYS = frozenset({"when", "text", "tool_calls", "truncated"})
CALL_KEYS = frozenset({"name", "args", "id"})


LAST_TOOL_RESULT = "{last_tool_result}"
"""In a step's text, replaced by the latest tool result the model was shown (unframed)."""

_FRAME = re.compile(r"<tool_output[^>]*>\n?(.*?)\n?</tool_output>", re.DOTALL)


def last_tool_result(messages: Sequence[Message]) -> str:
    """The content of the latest TOOL message, without the worker's untrusted-data framing."""
    for msg in reversed(messages):
        if msg.role is Role.TOOL:
            framed = _FRAME.search(msg.content)
            return (framed.group(1) if framed else msg.content).strip()
    return ""


class ScriptError(ValueError):
    """A script file is unreadable or a step is malformed; the message names the step."""


@dataclass(frozen=True, slots=True)
class ScriptStep:
    """One scripted model answer: ``text`` or ``tool_calls``, used when ``when`` matches."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()  # an empty id: number it for me
    when: str = ""
    truncated: bool = False


def _parse_call(where: str, raw: object) -> ToolCall:
    if not isinstance(raw, dict):
        raise ScriptError(f"{where}: a tool call must be an object with name and args")
    unknown = set(raw) - CALL_KEYS
    if unknown:
        raise ScriptError(f"{where}: unknown keys {sorted(unknown)} (known: name, args, id)")
    name, args, call_id = raw.get("name"), raw.get("args", {}), raw.get("id", "")
    if not isinstance(name, str) or not name:
        raise ScriptError(f"{where}: 'name' must be a non-empty string")
    if not isinstance(args, dict):
        raise ScriptError(f"{where}: 'args' must be an object")
    if not isinstance(call_id, str):
        raise ScriptError(f"{where}: 'id' must be a string")
    return ToolCall(call_id, name, args)


def parse_script(data: object, *, source: str = "script") -> tuple[ScriptStep, ...]:
    """The steps in a decoded script; raises ``ScriptError`` naming the first bad step."""
    if not isinstance(data, list):
        raise ScriptError(f"{source}: must be a JSON list of steps")
    steps = []
    for index, raw in enumerate(data):
        where = f"{source}: step {index}"
        if not isinstance(raw, dict):
            raise ScriptError(f"{where}: must be an object")
        unknown = set(raw) - STEP_KEYS
        if unknown:
            known = ", ".join(sorted(STEP_KEYS))
            raise ScriptError(f"{where}: unknown keys {sorted(unknown)} (known: {known})")
        if "text" not in raw and "tool_calls" not in raw:
            raise ScriptError(f"{where}: needs 'text', 'tool_calls' or both")
        text, when = raw.get("text", ""), raw.get("when", "")
        truncated = raw.get("truncated", False)
        if not isinstance(text, str):
            raise ScriptError(f"{where}: 'text' must be a string")
        if not isinstance(when, str):
            raise ScriptError(f"{where}: 'when' must be a string")
        if not isinstance(truncated, bool):
            raise ScriptError(f"{where}: 'truncated' must be true or false")
        raw_calls = raw.get("tool_calls", [])
        if not isinstance(raw_calls, list) or ("tool_calls" in raw and not raw_calls):
            raise ScriptError(f"{where}: 'tool_calls' must be a non-empty list")
        calls = tuple(
            _parse_call(f"{where}: tool call {i}", call) for i, call in enumerate(raw_calls)
        )
        steps.append(ScriptStep(text, calls, when, truncated))
    return tuple(steps)


def load_script(path: Path) -> tuple[ScriptStep, ...]:
    """The steps in the JSON script file at ``path``."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ScriptError(f"script {path} does not exist: check brain.script") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScriptError(f"script {path}: cannot read: {exc}") from None
    except ValueError as exc:
        raise ScriptError(f"script {path}: not valid JSON: {exc}") from None
    return parse_script(data, source=f"script {path}")


def last_user_text(messages: Sequence[Message]) -> str:
    """The text of the last USER message ("" when there is none)."""
    return next((m.content for m in reversed(messages) if m.role is Role.USER), "")


def default_reply(user_text: str) -> str:
    """What the scripted brain says when it has no step left."""
    said = " ".join(user_text.split())[:200]
    return "Hi! I'm shelldon's scripted brain and I have nothing scripted for this" + (
        f", so I can only echo you: {said}" if said else "."
    )


class ScriptedProvider:
    """A ``Provider`` that answers from ``steps``; ``requests`` records what it was asked."""

    name = "scripted"

    def __init__(self, steps: Sequence[ScriptStep] = ()) -> None:
        self._unused: list[ScriptStep] = list(steps)
        self._next_id = 0
        # The latest requests, for tests; bounded so a long-running scripted service stays lean.
        self.requests: collections.deque[tuple[tuple[Message, ...], tuple[ToolDefinition, ...]]]
        self.requests = collections.deque(maxlen=64)

    def __repr__(self) -> str:
        return f"ScriptedProvider(steps_left={len(self._unused)})"

    @property
    def steps_left(self) -> int:
        """How many steps are still unused."""
        return len(self._unused)

    def _take(self, user_text: str) -> ScriptStep | None:
        lowered = user_text.lower()
        for i, step in enumerate(self._unused):
            if step.when and step.when.lower() in lowered:
                return self._unused.pop(i)
        for i, step in enumerate(self._unused):
            if not step.when:
                return self._unused.pop(i)
        return None

    def _call_id(self, call: ToolCall) -> str:
        if call.id:
            return call.id
        self._next_id += 1
        return f"script_{self._next_id}"

    async def complete_with_tools(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *, deadline: float
    ) -> Completion:
        """The next scripted answer for ``messages``; a passed ``deadline`` is a timeout."""
        if time.monotonic() >= deadline:
            raise ProviderError("timeout", "the turn's deadline passed before the model call")
        self.requests.append((tuple(messages), tuple(tools)))
        user_text = last_user_text(messages)
        step = self._take(user_text)
        prompt_chars = sum(len(m.content) for m in messages)
        if step is None:
            text = default_reply(user_text)
            log.info("provider.completion", provider=self.name, scripted=False)
            return Completion(text=text, usage=Usage(prompt_chars // 4, len(text) // 4))
        calls = tuple(ToolCall(self._call_id(c), c.name, dict(c.args)) for c in step.tool_calls)
        log.info("provider.completion", provider=self.name, scripted=True, tool_calls=len(calls))
        return Completion(
            text=step.text.replace(LAST_TOOL_RESULT, last_tool_result(messages)),
            tool_calls=calls,
            usage=Usage(prompt_chars // 4, len(step.text) // 4 + 8 * len(calls)),
            truncated=step.truncated,
        )

    async def aclose(self) -> None:
        """Nothing to release."""
