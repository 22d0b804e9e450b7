"""Test doubles for the worker tests: a scripted brain, call builders, a small tool registry."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from shelldon.config import Settings
from shelldon.contracts import Completion, Job, JobFailed, Tier, ToolCall, ToolDefinition, Usage
from shelldon.worker.prompt import CATALOGUE_INTRO
from shelldon.worker.tools import Registry, ToolError, ToolSpec, context_from_settings

OPEN_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


class ScriptedBrain:
    """An ``ask`` that answers each Job with the next scripted answer and records the Jobs."""

    def __init__(self, answers: Iterable[Completion | JobFailed]) -> None:
        self.answers = list(answers)
        self.jobs: list[Job] = []

    def __call__(self, job: Job) -> Completion | JobFailed:
        self.jobs.append(job)
        if not self.answers:
            raise AssertionError(f"the brain was asked {len(self.jobs)} times; script ran out")
        return self.answers.pop(0)


def call(name: str, call_id: str = "", /, **args: Any) -> ToolCall:
    """A ToolCall with an id derived from the name unless given."""
    return ToolCall(call_id or f"id-{name}", name, args)


def calls(*tool_calls: ToolCall, text: str = "", tokens: int = 0) -> Completion:
    """A Completion that asks for ``tool_calls``."""
    return Completion(text=text, tool_calls=tool_calls, usage=Usage(tokens, tokens))


def say(text: str, tokens: int = 0) -> Completion:
    """A Completion with final text."""
    return Completion(text=text, usage=Usage(tokens, tokens))


@dataclass
class Counters:
    """How often each test tool ran."""

    runs: dict[str, int] = field(default_factory=dict)

    def bump(self, name: str) -> None:
        self.runs[name] = self.runs.get(name, 0) + 1

    def __getitem__(self, name: str) -> int:
        return self.runs.get(name, 0)


def make_registry(settings: Settings, counters: Counters) -> Registry:
    """FREE echo/count/fails/broken_selfcoded and RISKY delete/deploy tools that count runs."""
    registry = Registry(context_from_settings(settings))

    def tool(name: str, tier: Tier, fn: Any, *, self_coded: bool = False) -> None:
        def counted(ctx: Any, **kwargs: Any) -> str:
            counters.bump(name)
            return str(fn(**kwargs))

        definition = ToolDefinition(name, f"test tool {name}", OPEN_SCHEMA, tier)
        registry.add(ToolSpec(definition, counted, self_coded=self_coded))

    def fails(**_: Any) -> str:
        raise ToolError("the file is not there")

    def broken(**_: Any) -> str:
        raise ZeroDivisionError("division by zero")

    tool("echo", Tier.FREE, lambda **kw: f"echo {sorted(kw.items())}")
    tool("count", Tier.FREE, lambda **kw: "counted")
    tool("fails", Tier.FREE, fails)
    tool("broken_selfcoded", Tier.FREE, broken, self_coded=True)
    tool("delete", Tier.RISKY, lambda **kw: f"deleted {kw.get('path')}")
    tool("deploy", Tier.RISKY, lambda **kw: "deployed")
    return registry


def catalogued(job: Job) -> set[str]:
    """The self-coded tools a Job's system prompt lists in its catalogue (one per line)."""
    system = job.messages[0].content if job.messages else ""
    if CATALOGUE_INTRO not in system:
        return set()
    block = system.split(CATALOGUE_INTRO, 1)[1].strip("\n").split("\n\n", 1)[0]
    return {line.split(":", 1)[0] for line in block.splitlines() if line}


def reachable(job: Job) -> set[str]:
    """Every tool a Job lets the model reach: offered in full or listed in the catalogue."""
    return {t.name for t in job.tools} | catalogued(job)
