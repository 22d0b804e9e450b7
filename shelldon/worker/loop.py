"""The bounded agentic loop that runs inside the per-turn worker, and its park/resume.

prompt + tool schemas → ``Job`` → ``Completion`` (self-coded tools go as a catalogue in the
prompt until described or called: ``worker.catalogue``); FREE calls run inline and their
results go back; text ends the turn through the ops parser into a ``Result``. The first RISKY
call parks the turn (``RequestToolApproval`` in ``Result.ops``); ``run_resume`` picks it up in
a fresh worker after the owner's tap. Ceilings (``settings.limits``): ``max_tool_executions``
tool runs per logical turn, the ``deadline``, and a best-effort reply under ``bail_margin_s``.
``ask`` is the channel round trip; the loop never touches a socket, so tests script ``ask``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from shelldon.config import LimitsSettings, Settings
from shelldon.contracts import (
    Completion,
    Job,
    JobFailed,
    Message,
    Op,
    ProposeTool,
    RequestToolApproval,
    Result,
    ResumeRequest,
    Role,
    Tier,
    ToolCall,
    ToolDefinition,
    ToolResult,
    TurnRequest,
    Usage,
)
from shelldon.replies import describe_call, model_apology
from shelldon.worker.catalogue import (
    DESCRIBE_TOOLS,
    definition_text,
    describe,
    loaded_in,
)
from shelldon.worker.ops import parse_ops
from shelldon.worker.prompt import build_messages, tool_message
from shelldon.worker.tools import Registry, execute_tool
from shelldon.worker.tools.registry import check_args

log = structlog.get_logger(__name__)

Ask = Callable[[Job], Completion | JobFailed]
"""One model round trip: send a Job, get its Completion or the broker's JobFailed."""

Clock = Callable[[], float]

Runner = Callable[[Registry, ToolCall], ToolResult]
"""Runs one tool call: ``execute_tool``, or the approved call's confined child."""

PROPOSE_TOOL = ToolDefinition(
    name="propose_tool",
    description=(
        "Propose a new tool for your permanent toolbox. `code` is a Python module defining "
        "run(**kwargs) -> str, DESCRIPTION (str) and PARAMS_SCHEMA (a JSON schema dict); "
        "`test` is a pytest file that imports the module by `name` and checks it. The tool is "
        "tested in a sandbox and shown to the owner, who decides whether it goes live. To "
        "improve one of your live tools, give its name as both `name` and `replaces`: the "
        "owner sees what changed and the old version stays live until they approve."
    ),
    params_schema={
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "module name, a Python identifier"},
            "code": {"type": "string", "description": "the tool module's source"},
            "test": {"type": "string", "description": "its pytest test file's source"},
            "replaces": {
                "type": "string",
                "description": "the live tool this is a new version of (same as name); omit "
                "for a new tool",
            },
        },
        "required": ["name", "code", "test"],
        "additionalProperties": False,
    },
    tier=Tier.FREE,
)
"""The op tool: a call to it becomes a ``ProposeTool`` op; it is offered in every Job."""

PROPOSAL_RECEIVED = "proposal received: it will be gated and shown to the owner"
DENIED_BY_OWNER = "denied by owner"


def split_tools(
    registry: Registry,
) -> tuple[tuple[ToolDefinition, ...], tuple[ToolDefinition, ...]]:
    """The registry's built-ins (offered in full) and its live self-coded tools (offered
    through the catalogue), each in the registry's order; names the loop answers itself are
    left out of both: no registered tool shadows them."""
    reserved = (PROPOSE_TOOL.name, DESCRIBE_TOOLS.name)
    builtin: list[ToolDefinition] = []
    own: list[ToolDefinition] = []
    for definition in registry.definitions():
        if definition.name in reserved:
            continue
        (own if registry.specs[definition.name].self_coded else builtin).append(definition)
    return tuple(builtin), tuple(own)


def _offered(
    builtin: tuple[ToolDefinition, ...],
    known: tuple[ToolDefinition, ...],
    loaded: set[str] | frozenset[str],
) -> tuple[ToolDefinition, ...]:
    """What one Job offers in full: the built-ins, the self-coded tools this turn ``loaded``,
    ``describe_tools`` when there are self-coded tools, and ``propose_tool``."""
    chosen = tuple(d for d in known if d.name in loaded) if loaded else ()
    describe_tool = (DESCRIBE_TOOLS,) if known else ()
    return (*builtin, *chosen, *describe_tool, PROPOSE_TOOL)


@dataclass(slots=True)
class _Turn:
    """The mutable state of one worker's loop; lives and dies inside one call of ``_loop``."""

    turn_id: str
    registry: Registry
    ask: Ask
    limits: LimitsSettings
    deadline: float
    clock: Clock
    messages: list[Message]
    executions_left: int
    model_calls: int = 0
    tool_executions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    ops: list[Op] = field(default_factory=list)
    best_text: str = ""
    builtin: tuple[ToolDefinition, ...] = ()
    # The self-coded tools described or called this turn: offered in full from then on.
    known: tuple[ToolDefinition, ...] = ()
    loaded: set[str] = field(default_factory=set)

    def result(self, reply: str) -> Result:
        return Result(
            turn_id=self.turn_id,
            reply=reply,
            ops=tuple(self.ops),
            tool_failures=tuple(self.registry.failures),
            model_calls=self.model_calls,
            tool_executions=self.tool_executions,
            usage=Usage(self.input_tokens, self.output_tokens),
        )

    def take_text(self, text: str) -> str:
        """The owner-facing part of ``text``; its ops join the turn's ops, whenever they came."""
        parsed = parse_ops(text)
        self.ops.extend(parsed.ops)
        return parsed.reply

    def finish(self, reply: str, *, truncated: bool = False) -> Result:
        if truncated:
            reply = f"{reply} …(my answer was cut off at the length limit)".strip()
        return self.result(
            reply or ("Done." if self.ops else "Sorry — I came up empty; ask again?")
        )

    def give_up(self, reason: str) -> Result:
        """End early with the best text the model gave, or an apology naming ``reason``."""
        log.info("turn_cut_short", turn_id=self.turn_id, reason=reason)
        if self.best_text:
            return self.result(f"{self.best_text}\n\n({reason}.)")
        return self.result(f"Sorry — {reason} before I could answer. Ask again, in smaller steps?")

    def time_is_short(self) -> bool:
        return self.deadline - self.clock() < self.limits.bail_margin_s

    def run_call(self, call: ToolCall, runner: Runner = execute_tool) -> None:
        """Run one call with ``runner`` (or refuse it at a ceiling) and append its TOOL message;
        an approved call gets its own runner (its confined child)."""
        if self.executions_left <= 0:
            limit = self.limits.max_tool_executions
            result = ToolResult(
                call.id, False, f"not run: this turn's limit of {limit} tool runs is spent"
            )
        elif self.time_is_short():
            result = ToolResult(call.id, False, "not run: this turn is out of time")
        else:
            self.executions_left -= 1
            self.tool_executions += 1
            if call.name == PROPOSE_TOOL.name:
                result = self.propose(call)
            elif call.name == DESCRIBE_TOOLS.name:
                result, names = describe(call, self.known, self.registry.context.max_output_chars)
                self.loaded.update(names)
            elif (unloaded := self.unloaded(call)) is not None:
                result = unloaded
            else:
                result = runner(self.registry, call)
        self.messages.append(tool_message(call, result))

    def unloaded(self, call: ToolCall) -> ToolResult | None:
        """A call of a self-coded tool the model has not loaded: from now on it is offered in
        full; if its arguments break the real schema, the answer carries that schema (None:
        run it as usual)."""
        tool = next((t for t in self.known if t.name == call.name), None)
        if tool is None or call.name in self.loaded:
            return None
        self.loaded.add(call.name)
        problem = check_args(tool.params_schema, call.args) if not call.args_error else None
        if not problem:
            return None
        return ToolResult(call.id, False, f"{call.name}: {problem}\n\n{definition_text(tool)}")

    def propose(self, call: ToolCall) -> ToolResult:
        if call.args_error:
            return ToolResult(call.id, False, f"arguments were not valid JSON: {call.args_error}")
        values = {key: call.args.get(key) for key in ("name", "code", "test")}
        bad = [key for key, value in values.items() if not isinstance(value, str) or not value]
        if bad:
            return ToolResult(
                call.id, False, f"propose_tool needs non-empty strings for: {', '.join(bad)}"
            )
        replaces = call.args.get("replaces", "")
        if not isinstance(replaces, str):
            return ToolResult(call.id, False, "propose_tool: replaces must be a tool's name")
        self.ops.append(
            ProposeTool(
                str(values["name"]), str(values["code"]), str(values["test"]), replaces.strip()
            )
        )
        return ToolResult(call.id, True, PROPOSAL_RECEIVED)

    def is_risky(self, call: ToolCall) -> bool:
        # A call whose arguments did not parse can never run, so it is answered, not parked.
        return (
            call.name != PROPOSE_TOOL.name
            and not call.args_error
            and self.registry.tier(call.name) is Tier.RISKY
        )

    def run_calls(self, completion: Completion, said: str) -> Result | None:
        """Run the FREE calls; park at the first RISKY one (dropping the calls after it)."""
        calls: Sequence[ToolCall] = completion.tool_calls
        risky_at = next((i for i, c in enumerate(calls) if self.is_risky(c)), None)
        kept = tuple(calls if risky_at is None else calls[: risky_at + 1])
        self.messages.append(Message(Role.ASSISTANT, completion.text, kept))
        for index, call in enumerate(kept):
            if index == risky_at and self.executions_left > 0 and not self.time_is_short():
                return self.park(call, said)
            self.run_call(call)
        return None

    def park(self, call: ToolCall, lead: str) -> Result:
        summary = describe_call(call)
        self.ops.append(RequestToolApproval(call, summary, tuple(self.messages)))
        log.info("turn_parked", turn_id=self.turn_id, tool=call.name)
        # The question itself goes on the approval card, in the parent's words: sent here
        # too, the owner would read it twice.
        return self.result(lead)


def _loop(turn: _Turn) -> Result:
    while True:
        if turn.time_is_short():
            return turn.give_up("I ran out of time for this turn")
        tools = _offered(turn.builtin, turn.known, turn.loaded)
        offered = tools if turn.executions_left > 0 else ()
        answer = turn.ask(Job(turn.turn_id, tuple(turn.messages), offered, turn.deadline))
        turn.model_calls += 1
        if isinstance(answer, JobFailed):
            log.warning("model_call_failed", turn_id=turn.turn_id, kind=answer.kind)
            return turn.result(model_apology(answer))
        turn.input_tokens += answer.usage.input_tokens
        turn.output_tokens += answer.usage.output_tokens
        said = turn.take_text(answer.text)
        if said:
            turn.best_text = said
        if not answer.tool_calls:
            return turn.finish(said, truncated=answer.truncated)
        if not offered:
            # Tools were withdrawn at the ceiling and the model still asked for one.
            limit = turn.limits.max_tool_executions
            return turn.give_up(f"I hit my limit of {limit} tool runs for one turn")
        parked = turn.run_calls(answer, said)
        if parked is not None:
            return parked


def run_turn(
    request: TurnRequest,
    registry: Registry,
    ask: Ask,
    settings: Settings,
    deadline: float,
    *,
    clock: Clock = time.monotonic,
) -> Result:
    """Run one owner (or scheduled) turn to its ``Result``; never raises for expected failures."""
    builtin, known = split_tools(registry)
    messages = list(build_messages(request, settings, _offered(builtin, known, set()), known))
    turn = _Turn(
        request.turn_id,
        registry,
        ask,
        settings.limits,
        deadline,
        clock,
        messages,
        executions_left=settings.limits.max_tool_executions,
        builtin=builtin,
        known=known,
    )
    return _loop(turn)


def executions_spent(messages: Sequence[Message]) -> int:
    """Tool results since the owner's last message: what a parked turn already spent."""
    spent = 0
    for message in reversed(messages):
        if message.role is Role.USER:
            break
        if message.role is Role.TOOL:
            spent += 1
    return spent


def run_resume(
    request: ResumeRequest,
    registry: Registry,
    ask: Ask,
    settings: Settings,
    deadline: float,
    *,
    clock: Clock = time.monotonic,
    confine: Callable[[], None] | None = None,
    run_approved: Runner | None = None,
) -> Result:
    """Resume a parked turn: run the approved call (or answer "denied by owner"), then loop.
    The FREE results from before the pause travel in the parked messages and are never re-run;
    the tool-run ceiling spans the whole logical turn, pause included. ``run_approved`` runs
    the call (in its own confined child, ``worker.approved``); ``confine`` closes the FREE-turn
    confinement right after it, before the model sees its result."""
    parked = request.parked
    messages = list(parked.messages)
    left = settings.limits.max_tool_executions - executions_spent(messages)
    turn = _Turn(
        request.turn_id,
        registry,
        ask,
        settings.limits,
        deadline,
        clock,
        messages,
        executions_left=max(1, left),
    )
    turn.builtin, turn.known = split_tools(registry)
    turn.loaded = loaded_in(messages, turn.known)
    if request.approved:
        # The owner approved this exact call, so the ceiling grants it its one run.
        turn.run_call(parked.call, run_approved or functools.partial(execute_tool, approved=True))
    else:
        messages.append(
            tool_message(parked.call, ToolResult(parked.call.id, False, DENIED_BY_OWNER))
        )
        turn.executions_left = max(0, left)
    if confine is not None:
        confine()
    log.info(
        "turn_resumed", turn_id=request.turn_id, tool=parked.call.name, approved=request.approved
    )
    return _loop(turn)
