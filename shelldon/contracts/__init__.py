"""The messages that cross a boundary in shelldon: frozen, slotted dataclasses and their codec.

Tool vocabulary (the broker normalizes every provider to these): ``Tier``, ``ToolDefinition``,
``ToolCall``, ``ToolResult``, ``Message``, ``Completion``. Turn vocabulary between the actors
and the forked worker: ``TurnRequest``, ``ResumeRequest``, ``Assignment``, ``Job``, ``JobFailed``,
``Result``.
Ops a turn hands back for the service to apply: ``RequestToolApproval``, ``ProposeTool``,
``Remember``, ``Schedule``. Transport vocabulary: ``InboundMessage``, ``Decision``.

This package imports nothing from the rest of shelldon.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from shelldon.contracts.codec import (
    MAX_BLOB_BYTES,
    ContractError,
    contract,
    decode,
    encode,
    registered_contracts,
)

__all__ = [
    "MAX_BLOB_BYTES",
    "Assignment",
    "Completion",
    "ContractError",
    "Decision",
    "InboundMessage",
    "Job",
    "JobFailed",
    "Message",
    "Op",
    "Photo",
    "ProposeTool",
    "RequestToolApproval",
    "Remember",
    "Result",
    "ResumeRequest",
    "Role",
    "Schedule",
    "Tier",
    "ToolCall",
    "ToolDefinition",
    "ToolFailure",
    "ToolResult",
    "ToolStarted",
    "TurnRequest",
    "Usage",
    "contract",
    "decode",
    "encode",
    "registered_contracts",
]


class Tier(enum.StrEnum):
    """FREE tools run inline; RISKY tools run only after the owner's tap."""

    FREE = "free"
    RISKY = "risky"


class Role(enum.StrEnum):
    """Who said a ``Message``: the system prompt, the owner, the model, or a tool result."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@contract("tool_definition")
@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """A tool as the model sees it: name, what it does, a JSON schema for its arguments, tier."""

    name: str
    description: str
    params_schema: dict[str, Any]
    tier: Tier = Tier.FREE


@contract("tool_call")
@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool invocation the model asked for. ``args_error`` is set (and ``args`` empty) when
    the provider's arguments were not a valid JSON object; such a call is answered, never run."""

    id: str
    name: str
    args: dict[str, Any]
    args_error: str = ""


@contract("tool_result")
@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call produced; ``ok=False`` carries an error text the model can act on."""

    id: str
    ok: bool
    content: str


@contract("photo")
@dataclass(frozen=True, slots=True)
class Photo:
    """An image the owner sent, as everything but the broker knows it: ``key`` names its
    bytes, which only the broker holds (in memory, for the turn); ``base64`` (the image as the
    provider APIs take it) is empty everywhere else and is filled by the broker alone, for the
    provider call, and never encoded back."""

    key: str
    media_type: str
    width: int
    height: int
    size: int
    base64: str = field(default="", repr=False)


@contract("message")
@dataclass(frozen=True, slots=True)
class Message:
    """One conversation message. An assistant message may carry tool calls; a TOOL message
    answers one of them by ``tool_call_id`` (``is_error`` when the result was not ok); an
    owner's message may carry a ``photo``."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    is_error: bool = False
    photo: Photo | None = None

    @classmethod
    def from_result(cls, result: ToolResult) -> Message:
        """The TOOL message that feeds ``result`` back to the model."""
        return cls(Role.TOOL, result.content, tool_call_id=result.id, is_error=not result.ok)


@contract("usage")
@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens a model call spent."""

    input_tokens: int = 0
    output_tokens: int = 0


@contract("completion")
@dataclass(frozen=True, slots=True)
class Completion:
    """A model's answer: final ``text``, or ``tool_calls`` to continue the loop. ``truncated``
    when the provider stopped at its token limit."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    truncated: bool = False


@contract("job")
@dataclass(frozen=True, slots=True)
class Job:
    """A worker's request for one model call; ``deadline`` is an absolute ``time.monotonic()``."""

    turn_id: str
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...]
    deadline: float


@contract("job_failed")
@dataclass(frozen=True, slots=True)
class JobFailed:
    """The broker could not complete a Job; ``kind`` is a ``ProviderError`` kind."""

    turn_id: str
    kind: str
    message: str
    retry_after: float | None = None


@contract("request_tool_approval")
@dataclass(frozen=True, slots=True)
class RequestToolApproval:
    """Op: park ``call`` until the owner decides; ``messages`` is the loop state to resume."""

    call: ToolCall
    summary: str
    messages: tuple[Message, ...]


@contract("propose_tool")
@dataclass(frozen=True, slots=True)
class ProposeTool:
    """Op: the model wrote a tool (``code``) and its pytest test; the service stages and gates it.
    ``replaces`` names the live tool this is a new version of ("" for a new tool)."""

    name: str
    code: str
    test: str
    replaces: str = ""


@contract("remember")
@dataclass(frozen=True, slots=True)
class Remember:
    """Op: keep a fact about the owner or the world for later turns."""

    fact: str


@contract("schedule")
@dataclass(frozen=True, slots=True)
class Schedule:
    """Op: start a turn with ``prompt`` at ``at`` (epoch seconds, UTC)."""

    at: float
    prompt: str


Op = RequestToolApproval | ProposeTool | Remember | Schedule


@contract("tool_failure")
@dataclass(frozen=True, slots=True)
class ToolFailure:
    """A self-coded tool's call ``call_id`` failed (it raised, or could not be imported); the
    service debits a strike only for a call it relayed itself (``shelldon.rules.turnwatch``)."""

    name: str
    error: str
    call_id: str


@contract("tool_started")
@dataclass(frozen=True, slots=True)
class ToolStarted:
    """Worker → turn actor, before a self-coded tool's call ``call_id`` runs: the turn actor
    blames a hang on it only where no other self-coded call could have been running."""

    turn_id: str
    name: str
    call_id: str


@contract("turn_request")
@dataclass(frozen=True, slots=True)
class TurnRequest:
    """Everything a forked worker needs to run one turn; ``source`` is "owner" or "schedule"."""

    turn_id: str
    chat_id: int
    text: str
    history: tuple[Message, ...] = ()
    facts: tuple[str, ...] = ()
    source: str = "owner"
    photo: Photo | None = None


@contract("assignment")
@dataclass(frozen=True, slots=True)
class Assignment:
    """A pre-forked spare worker's turn, sent on its channel: the request (a ``TurnRequest`` as
    ``encode`` made it, the bytes the service sent) and the deadline the zygote fixed when it
    handed the turn over (``time.monotonic()``), never at the spare's fork."""

    request: bytes
    deadline: float


@contract("resume_request")
@dataclass(frozen=True, slots=True)
class ResumeRequest:
    """Resume a parked turn: run (approved) or refuse (denied) the parked call, then go on."""

    turn_id: str
    chat_id: int
    parked: RequestToolApproval
    approved: bool


@contract("result")
@dataclass(frozen=True, slots=True)
class Result:
    """How a turn ended: the owner's reply, ops for the service to apply, self-coded tool failures,
    and the model calls and tool executions it spent."""

    turn_id: str
    reply: str
    ops: tuple[Op, ...] = ()
    tool_failures: tuple[ToolFailure, ...] = ()
    model_calls: int = 0
    tool_executions: int = 0
    usage: Usage = field(default_factory=Usage)


@contract("inbound_message")
@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A chat message from a transport; ``update_id`` is the transport's id for dedup (0: none);
    ``photo`` when the owner sent an image (its bytes are never in here)."""

    chat_id: int
    user_id: int
    text: str
    update_id: int = 0
    photo: Photo | None = None


@contract("decision")
@dataclass(frozen=True, slots=True)
class Decision:
    """The owner's tap on an approval keyboard. ``approved`` None (a malformed tap) means deny."""

    chat_id: int
    user_id: int
    turn_id: str
    approved: bool | None
    update_id: int = 0
    callback_id: str = ""
    message_id: int = 0
