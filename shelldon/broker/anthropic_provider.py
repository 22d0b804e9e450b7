"""Anthropic Messages API through the official SDK; also GLM (Z.ai) and any server that speaks
the Anthropic wire format at another ``base_url``.

The API wants roles to alternate and each ``tool_use`` answered by ``tool_result`` blocks at
the head of the next user message, so same-role messages merge and the TOOL messages after a
call become one user message. The SDK's retries are off and each request's timeout is what
remains of the deadline: ``call_with_retries`` owns both. Every SDK exception is translated in
``ERROR_KINDS``, most specific first.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import anthropic
import structlog

from shelldon.broker.provider import (
    Backoff,
    ProviderError,
    clip,
    complete_logged,
    object_schema,
    parse_retry_after,
    scrub,
)
from shelldon.broker.transcript import pair_tool_results
from shelldon.contracts import Completion, Message, Role, ToolCall, ToolDefinition, Usage

log = structlog.get_logger(__name__)

BY_STATUS = "by_status"
"""Kind placeholder: decide from the HTTP status (5xx: server, else bad_request)."""

_ERROR_KIND_NAMES: tuple[tuple[str, str], ...] = (
    # Subclasses named by the API's error_code, before the status classes they extend.
    ("ContractSpendLimitReachedError", "quota"),
    ("EnforcedSpendLimitReachedError", "quota"),
    ("RampLimitExceededError", "rate_limited"),
    ("LinkedOrganizationBillingUnavailableError", "quota"),
    ("LinkedOrganizationSpendLimitReachedError", "quota"),
    ("CMEKContextUnavailableError", "server"),
    ("CMEKKeyUnreachableError", "server"),
    ("CMEKKeyDisabledError", "auth"),
    ("CMEKKeyNetworkBlockedError", "auth"),
    ("ClaudeCodeKeyCreatorNotMemberError", "auth"),
    ("ClaudeCodeVersionTooOldError", "bad_request"),
    ("OrganizationOnHoldError", "auth"),
    ("OrganizationTypeNotSupportedError", "auth"),
    ("ParentOrganizationRequiredError", "auth"),
    ("WorkspaceHumanReviewDisabledError", "auth"),
    ("SandboxEgressRestrictedError", "auth"),
    ("RequestBodyEncodingInvalidError", "bad_request"),
    ("RequestBodyEncodingUnsupportedError", "bad_request"),
    ("RequestBodyTooLargeAfterDecodingError", "bad_request"),
    # A 400: the organization turned off URL sources and server tools (SDK 2.17).
    ("OrganizationURLFetchDisabledError", "bad_request"),
    # One class per HTTP status.
    ("OverloadedError", "overloaded"),
    # A 503 while the account's workspace is still being connected to its storage (SDK 2.16).
    ("StorageNotReadyError", "overloaded"),
    ("ServiceUnavailableError", "overloaded"),
    ("GatewayTimeoutError", "timeout"),
    ("HTTPNotImplementedError", "bad_request"),
    ("InternalServerError", "server"),
    ("RateLimitError", "rate_limited"),
    ("ClientClosedRequestError", "server"),
    ("RequestTimeoutError", "timeout"),
    ("AuthenticationError", "auth"),
    ("PermissionDeniedError", "auth"),
    ("PaymentRequiredError", "quota"),
    ("NotFoundError", "bad_request"),
    ("ConflictError", "bad_request"),
    ("PreconditionFailedError", "bad_request"),
    ("ContentTooLargeError", "bad_request"),
    ("UnprocessableEntityError", "bad_request"),
    ("RequestHeaderFieldsTooLargeError", "bad_request"),
    ("BadRequestError", "bad_request"),
    ("APIStatusError", BY_STATUS),
    # No usable HTTP response.
    ("APITimeoutError", "timeout"),
    ("APIConnectionError", "unreachable"),
    ("APIResponseValidationError", "malformed"),
    ("APIWebhookValidationError", "malformed"),
    ("APIError", "server"),
    # Raised before any request: credentials the SDK could not load.
    ("IdentityTokenFileError", "auth"),
    ("WorkloadIdentityError", "auth"),
    ("CredentialsError", "auth"),
    ("RetryableError", "server"),
    ("AnthropicError", "server"),
)
"""SDK exception class names, most specific first, and the ``ProviderError`` kind of each."""

ERROR_KINDS: tuple[tuple[type[BaseException], str], ...] = tuple(
    (cls, kind)
    for name, kind in _ERROR_KIND_NAMES
    # Names an older SDK lacks are skipped; the SDK's base classes still catch their errors.
    if isinstance(cls := getattr(anthropic, name, None), type)
)
"""Every exception class the SDK exports, mapped to a ``ProviderError`` kind; a test holds
that none is missing and none is shadowed by an earlier, more general entry."""

HISTORY_GAP = "(earlier conversation omitted)"


def error_kind(exc: BaseException) -> str:
    """The ``ProviderError`` kind for an SDK exception (first matching entry of ERROR_KINDS)."""
    for cls, kind in ERROR_KINDS:
        if isinstance(exc, cls):
            if kind == BY_STATUS:
                status = getattr(exc, "status_code", 500)
                return "server" if status >= 500 else "bad_request"
            return kind
    return "server"


OUT_OF_CREDIT = "credit balance is too low"
"""What the API says, in a 400 invalid_request_error, when the account cannot pay: a quota, not
a fault of the request (so the fallback may answer, and the owner is told to check billing)."""


def translate_error(exc: anthropic.AnthropicError, *, secret: str | None = None) -> ProviderError:
    """The ``ProviderError`` for an SDK exception: kind, an actionable message, retry-after."""
    kind = error_kind(exc)
    if isinstance(exc, anthropic.BadRequestError) and OUT_OF_CREDIT in (exc.message or "").lower():
        kind = "quota"
    retry_after = None
    if isinstance(exc, anthropic.APIStatusError):
        retry_after = parse_retry_after(dict(exc.response.headers))
        if kind in {"auth", "quota"}:
            # The body of a refused credential can echo parts of it: say what to do instead.
            detail = f"HTTP {exc.status_code}: check the anthropic_api_key secret and the account"
        else:
            said = exc.api_message or (str(exc.body) if exc.body is not None else exc.message)
            detail = f"HTTP {exc.status_code} {exc.type or 'error'}: {clip(said)}"
        message = f"Anthropic API refused the request ({detail})"
    elif isinstance(exc, anthropic.APITimeoutError):
        message = "Anthropic API did not answer before the turn's deadline"
    elif isinstance(exc, anthropic.APIConnectionError):
        message = f"cannot reach the Anthropic API: {clip(str(exc.__cause__ or exc))}"
    else:
        message = f"Anthropic SDK error {type(exc).__name__}: {clip(str(exc))}"
    return ProviderError(kind, scrub(message, secret), retry_after)


def _text_blocks(text: str) -> list[dict[str, Any]]:
    # The API rejects empty text blocks.
    return [{"type": "text", "text": text}] if text.strip() else []


def _image_blocks(msg: Message) -> list[dict[str, Any]]:
    # Only a photo the broker attached (in base64, as the API takes it) is an image here.
    photo = msg.photo
    if photo is None or not photo.base64:
        return []
    source = {"type": "base64", "media_type": photo.media_type, "data": photo.base64}
    return [{"type": "image", "source": source}]


def as_plain_text(msg: Message) -> Message:
    """A tool call or tool result retold as plain text, for a request without tools."""
    if msg.role is Role.TOOL:
        outcome = "failed" if msg.is_error else "returned"
        return Message(Role.USER, f"[tool call {msg.tool_call_id} {outcome}: {msg.content}]")
    calls = "; ".join(f"{c.name}({json.dumps(c.args)}) as {c.id}" for c in msg.tool_calls)
    return Message(msg.role, f"{msg.content}\n[called tools: {calls}]".strip())


def to_anthropic(
    messages: Sequence[Message], tools: Sequence[ToolDefinition]
) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
    """``(system, messages, tools)`` in the Messages API's shape, roles alternating, every
    ``tool_use`` answered by a ``tool_result`` in the next user message."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})

    paired = pair_tool_results(messages)
    if not tools:
        # The API refuses tool blocks in a request that defines no tools: say them in words.
        paired = tuple(
            as_plain_text(m) if m.tool_calls or m.role is Role.TOOL else m for m in paired
        )
    for msg in paired:
        if msg.role is Role.SYSTEM:
            if msg.content.strip():
                system.append(msg.content)
        elif msg.role is Role.USER:
            add("user", _image_blocks(msg) + _text_blocks(msg.content))
        elif msg.role is Role.ASSISTANT:
            blocks = _text_blocks(msg.content.rstrip())
            blocks += [
                {"type": "tool_use", "id": call.id, "name": call.name, "input": call.args}
                for call in msg.tool_calls
            ]
            add("assistant", blocks)
        else:
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": msg.tool_call_id,
                        "content": msg.content or "(no output)",
                        "is_error": msg.is_error,
                    }
                ],
            )
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": _text_blocks(HISTORY_GAP)})
    wire_tools = [
        {
            "name": tool.name,
            "description": tool.description,
            "input_schema": object_schema(tool.params_schema),
        }
        for tool in tools
    ]
    return "\n\n".join(system), turns, wire_tools


def from_anthropic(response: object) -> Completion:
    """The Completion in an SDK ``Message``; a body of another shape raises a malformed
    ``ProviderError`` (a proxy's HTML page arrives here as a str)."""
    content = getattr(response, "content", None)
    if not isinstance(content, list):
        raise ProviderError(
            "malformed",
            f"the Anthropic endpoint answered with something that is not a message: "
            f"{clip(str(response), 120)!r}; check brain.base_url",
        )
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "text":
            texts.append(str(getattr(block, "text", "")))
        elif kind == "tool_use":
            args = getattr(block, "input", None)
            call_id = str(getattr(block, "id", "") or f"toolu_missing_{len(calls)}")
            name = str(getattr(block, "name", ""))
            if isinstance(args, dict):
                calls.append(ToolCall(call_id, name, args))
            else:
                calls.append(
                    ToolCall(call_id, name, {}, f"arguments were not a JSON object: {args!r:.80}")
                )
    usage = getattr(response, "usage", None)
    return Completion(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=Usage(
            int(getattr(usage, "input_tokens", 0) or 0),
            int(getattr(usage, "output_tokens", 0) or 0),
        ),
        truncated=getattr(response, "stop_reason", None) == "max_tokens",
    )


class AnthropicProvider:
    """A ``Provider`` over the Anthropic Messages API (or a compatible ``base_url``)."""

    name = "anthropic"

    def __init__(
        self,
        *,
        api_key: str,
        model: str,
        max_tokens: int,
        base_url: str = "",
        backoff: Backoff | None = None,
    ) -> None:
        self._api_key = api_key
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = base_url
        self.backoff = backoff or Backoff()
        self._client: anthropic.AsyncAnthropic | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url or 'default'!r})"

    def _client_here(self) -> anthropic.AsyncAnthropic:
        # The SDK's connection pool belongs to one event loop; a new loop gets a new client.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = anthropic.AsyncAnthropic(
                api_key=self._api_key,
                base_url=self.base_url or None,
                max_retries=0,
            )
            self._client_loop = loop
        return self._client

    async def complete_with_tools(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *, deadline: float
    ) -> Completion:
        """Text or tool calls for ``messages``; raises ``ProviderError``; ends by ``deadline``."""
        system, turns, wire_tools = to_anthropic(messages, tools)
        if not turns:
            raise ProviderError("bad_request", "nothing to send: the conversation has no message")
        request: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": turns,
        }
        if system:
            request["system"] = system
        if wire_tools:
            request["tools"] = wire_tools
        return await complete_logged(
            lambda timeout_s: self._attempt(request, timeout_s),
            deadline=deadline,
            what="anthropic.messages",
            backoff=self.backoff,
            provider=self.name,
            model=self.model,
        )

    async def _attempt(self, request: dict[str, Any], timeout_s: float) -> Completion:
        client = self._client_here()
        try:
            # The SDK's timeout is per read; wait_for bounds the whole exchange.
            response = await asyncio.wait_for(
                client.messages.create(**request, timeout=timeout_s), timeout_s
            )
        except anthropic.AnthropicError as exc:
            raise translate_error(exc, secret=self._api_key) from None
        except TimeoutError:
            raise ProviderError(
                "timeout", f"Anthropic API did not answer within {timeout_s:.1f}s"
            ) from None
        except ValueError as exc:
            # A body that claims to be JSON but is not: the SDK lets json's error escape.
            raise ProviderError(
                "malformed", f"the Anthropic endpoint sent unreadable JSON: {clip(str(exc), 120)}"
            ) from None
        return from_anthropic(response)

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        client, self._client = self._client, None
        if client is not None and self._client_loop is asyncio.get_running_loop():
            await client.close()
        self._client_loop = None
