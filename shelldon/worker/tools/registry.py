"""The tool registry and ``execute_tool``: the one place a tool call becomes a ``ToolResult``.

Tool families (``files``, ``pyeval``, ``http``, ``git``, ``shell``, self-coded discovery) each
contribute ``ToolSpec``s. A tool function takes the ``ToolContext`` first and the model's
arguments as keywords, returns text, and raises ``ToolError`` for failures the model should
read. ``execute_tool`` never raises: every failure becomes ``ToolResult(ok=False, ...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from shelldon.contracts import Tier, ToolCall, ToolDefinition, ToolFailure, ToolResult
from shelldon.worker.tools.isolation import IsolatedToolError

log = structlog.get_logger(__name__)


class ToolError(Exception):
    """An expected tool failure; its message goes back to the model as the result."""


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What a tool may know about its world: the jail root, the vault to refuse, the caps, and
    where the live self-coded tools are (None: no self-coded tools)."""

    workspace: Path
    vault: Path
    max_output_chars: int = 16000
    eval_timeout_s: float = 2.0
    shell_timeout_s: float = 20.0
    rlimit_as_mb: int = 1024
    rlimit_cpu_s: int = 30
    live_tools: Path | None = None
    # Why self-coded tools are off on this machine ("" = on): no filesystem layer confines them.
    selfcoded_off: str = ""
    # A self-coded tool runs only in a process whose filesystem layer is on (a test that calls
    # one in its own, unconfined process turns this off).
    require_fs_layer: bool = True


ToolFn = Callable[..., str]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A registered tool: its definition for the model, the function, whether the model wrote
    it (a self-coded tool's failures are debited as strikes; a built-in's never are), and for a
    RISKY tool whether an approved call with given arguments needs the network (None: never)."""

    definition: ToolDefinition
    fn: ToolFn
    self_coded: bool = False
    network: Callable[[dict[str, Any]], bool] | None = None

    @property
    def name(self) -> str:
        """The tool's name."""
        return self.definition.name


@dataclass(slots=True)
class Registry:
    """The tools one turn can call, plus the self-coded failures seen while building or using it."""

    context: ToolContext
    specs: dict[str, ToolSpec] = field(default_factory=dict)
    failures: list[ToolFailure] = field(default_factory=list)
    # Called with a self-coded tool's call just before it runs (the worker tells its parent,
    # so a tool that hangs until the worker is killed can still get its strike).
    announce: Callable[[ToolCall], None] | None = None

    def add(self, spec: ToolSpec) -> bool:
        """Register ``spec``; a self-coded tool never shadows a built-in (logged, refused)."""
        existing = self.specs.get(spec.name)
        if existing is not None:
            if spec.self_coded and not existing.self_coded:
                log.warning("self_coded_tool_shadows_builtin", tool=spec.name)
                return False
            log.warning("tool_registered_twice", tool=spec.name)
        self.specs[spec.name] = spec
        return True

    def add_all(self, specs: Iterable[ToolSpec]) -> None:
        """Register several specs."""
        for spec in specs:
            self.add(spec)

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """The definitions sent to the model, in a stable order."""
        return tuple(self.specs[name].definition for name in sorted(self.specs))

    def tier(self, name: str) -> Tier | None:
        """The tier of tool ``name``, or None if unknown."""
        spec = self.specs.get(name)
        return spec.definition.tier if spec else None


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list, tuple),
    "object": (dict,),
    "null": (type(None),),
}


def check_args(schema: dict[str, Any], args: dict[str, Any]) -> str | None:
    """Check ``args`` against the top level of a JSON object schema; return the problem or None."""
    props = schema.get("properties", {}) or {}
    missing = [k for k in schema.get("required", []) or [] if k not in args]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    if schema.get("additionalProperties") is False:
        extra = [k for k in args if k not in props]
        if extra:
            return f"unexpected argument(s): {', '.join(extra)}"
    for key, value in args.items():
        want = props.get(key, {}).get("type") if isinstance(props.get(key), dict) else None
        if not isinstance(want, str) or want not in _JSON_TYPES:
            continue
        bool_as_number = want in ("integer", "number") and isinstance(value, bool)
        if bool_as_number or not isinstance(value, _JSON_TYPES[want]):
            return f"argument {key!r} must be {want}, got {type(value).__name__}"
    return None


def string_params(**described: str) -> dict[str, Any]:
    """A params schema of required string arguments, each with its description, and no others."""
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": d} for name, d in described.items()},
        "required": list(described),
        "additionalProperties": False,
    }


def cap_output(text: str, limit: int) -> str:
    """Cut ``text`` to ``limit`` characters, saying how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n…[truncated {len(text) - limit} characters]"


def execute_tool(registry: Registry, call: ToolCall, *, approved: bool = False) -> ToolResult:
    """Run ``call`` and return its result; never raises. RISKY tools run only when approved."""
    if call.args_error:
        return ToolResult(call.id, False, f"arguments were not valid JSON: {call.args_error}")
    spec = registry.specs.get(call.name)
    if spec is None:
        known = ", ".join(sorted(registry.specs)) or "none"
        return ToolResult(call.id, False, f"unknown tool {call.name!r}; available tools: {known}")
    if spec.definition.tier is Tier.RISKY and not approved:
        return ToolResult(
            call.id, False, f"refused: {call.name} is RISKY and runs only after the owner approves"
        )
    problem = check_args(spec.definition.params_schema, call.args)
    if problem:
        return ToolResult(call.id, False, f"{call.name}: {problem}")
    if spec.self_coded and registry.announce is not None:
        registry.announce(call)
    try:
        output = spec.fn(registry.context, **call.args)
        if not isinstance(output, str):
            output = str(output)
    except ToolError as exc:
        return ToolResult(call.id, False, cap_output(str(exc), registry.context.max_output_chars))
    except (Exception, SystemExit) as exc:  # a self-coded tool may raise anything, even exit
        # A self-coded call's failure comes from its child already worded "Type: message".
        error = str(exc) if isinstance(exc, IsolatedToolError) else f"{type(exc).__name__}: {exc}"
        log.warning("tool_raised", tool=call.name, error=error, self_coded=spec.self_coded)
        if spec.self_coded:
            registry.failures.append(ToolFailure(call.name, error, call.id))
        return ToolResult(
            call.id,
            False,
            cap_output(f"{call.name} failed: {error}", registry.context.max_output_chars),
        )
    return ToolResult(call.id, True, cap_output(output, registry.context.max_output_chars))
