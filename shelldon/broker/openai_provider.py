"""OpenAI Chat Completions over plain aiohttp (no SDK): OpenAI, OpenRouter, llama.cpp's
server, Ollama, vLLM and any other server that speaks it.

The format has no error flag on a tool result, so a failed tool's text is prefixed ``ERROR:``;
arguments that are not a JSON object become a ``ToolCall`` with ``args_error`` set, never an
exception. The token cap is sent as ``max_completion_tokens`` to api.openai.com (its newer
models refuse ``max_tokens``) and as ``max_tokens`` everywhere else (local servers know only
that one). A provider without a key sends no ``Authorization`` header (llama.cpp, Ollama).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp
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

DEFAULT_BASE_URL = "https://api.openai.com/v1"
ERROR_PREFIX = "ERROR: "

CLIENT_ERROR_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (aiohttp.ConnectionTimeoutError, "timeout"),
    (aiohttp.SocketTimeoutError, "timeout"),
    (aiohttp.ServerTimeoutError, "timeout"),
    # Certificates, URLs and redirects are configuration: retrying cannot fix them.
    (aiohttp.ClientConnectorCertificateError, "bad_request"),
    (aiohttp.ClientConnectorSSLError, "bad_request"),
    (aiohttp.ClientSSLError, "bad_request"),
    (aiohttp.ServerFingerprintMismatch, "bad_request"),
    (aiohttp.NonHttpUrlRedirectClientError, "bad_request"),
    (aiohttp.InvalidUrlRedirectClientError, "bad_request"),
    (aiohttp.NonHttpUrlClientError, "bad_request"),
    (aiohttp.InvalidUrlClientError, "bad_request"),
    (aiohttp.InvalidURL, "bad_request"),
    (aiohttp.TooManyRedirects, "bad_request"),
    (aiohttp.RedirectClientError, "bad_request"),
    (aiohttp.ClientConnectorDNSError, "unreachable"),
    (aiohttp.ClientProxyConnectionError, "unreachable"),
    (aiohttp.ClientConnectorError, "unreachable"),
    (aiohttp.ClientHttpProxyError, "unreachable"),
    (aiohttp.ContentTypeError, "malformed"),
    (aiohttp.ServerDisconnectedError, "server"),
    (aiohttp.ClientConnectionResetError, "server"),
    (aiohttp.ClientPayloadError, "server"),
    (aiohttp.WSServerHandshakeError, "bad_request"),
    (aiohttp.ClientResponseError, "server"),
    (aiohttp.ServerConnectionError, "unreachable"),
    (aiohttp.ClientOSError, "unreachable"),
    (aiohttp.ClientConnectionError, "unreachable"),
    (aiohttp.UploadAbortedError, "server"),
    (aiohttp.ClientError, "unreachable"),
)
"""aiohttp's failures, most specific first, mapped to ``ProviderError`` kinds."""


def status_kind(status: int, code: str) -> str:
    """The ``ProviderError`` kind for an HTTP error ``status`` with the body's error ``code``."""
    if status == 429:
        # OpenAI answers 429 both for "slow down" and for "out of credit"; only one passes.
        return "quota" if code == "insufficient_quota" else "rate_limited"
    if status in (401, 403):
        return "auth"
    if status == 402:
        return "quota"
    if status == 408:
        return "timeout"
    if status in (503, 529):
        return "overloaded"
    if status == 504:
        return "timeout"
    if status >= 500 and status != 501:
        return "server"
    return "bad_request"


def token_field(base_url: str) -> str:
    """The request field that caps output tokens at ``base_url``."""
    host = urlsplit(base_url).hostname or ""
    return "max_completion_tokens" if host == "api.openai.com" else "max_tokens"


def parse_arguments(raw: object) -> tuple[dict[str, Any], str]:
    """``(args, "")`` for a tool call's ``function.arguments``, or ``({}, what was wrong)``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, ""
    if isinstance(raw, dict):  # Ollama sends an object instead of a JSON string.
        return raw, ""
    if not isinstance(raw, str):
        return {}, f"arguments must be a JSON object, got {type(raw).__name__}"
    try:
        value = json.loads(raw)
    except ValueError as exc:
        return {}, f"arguments were not valid JSON: {exc} in {clip(raw, 120)!r}"
    if not isinstance(value, dict):
        return {}, f"arguments must be a JSON object, got {type(value).__name__}: {clip(raw, 80)}"
    return value, ""


def _user_content(msg: Message) -> str | list[dict[str, Any]]:
    """A user message's content: its text, or text and image parts when the broker attached
    a photo (in base64, as the API takes it)."""
    photo = msg.photo
    if photo is None or not photo.base64:
        return msg.content
    url = f"data:{photo.media_type};base64,{photo.base64}"
    parts: list[dict[str, Any]] = [{"type": "text", "text": msg.content}] if msg.content else []
    return [*parts, {"type": "image_url", "image_url": {"url": url}}]


def to_openai(
    messages: Sequence[Message], tools: Sequence[ToolDefinition]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(messages, tools)`` in Chat Completions shape, every tool call answered right after."""
    wire: list[dict[str, Any]] = []
    for msg in pair_tool_results(messages):
        if msg.role is Role.SYSTEM:
            wire.append({"role": "system", "content": msg.content})
        elif msg.role is Role.USER:
            wire.append({"role": "user", "content": _user_content(msg)})
        elif msg.role is Role.ASSISTANT:
            out: dict[str, Any] = {"role": "assistant", "content": msg.content}
            if msg.tool_calls:
                out["content"] = msg.content or None
                out["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": json.dumps(call.args)},
                    }
                    for call in msg.tool_calls
                ]
            wire.append(out)
        else:
            text = msg.content or "(no output)"
            wire.append(
                {
                    "role": "tool",
                    "tool_call_id": msg.tool_call_id,
                    "content": ERROR_PREFIX + text if msg.is_error else text,
                }
            )
    wire_tools = [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": object_schema(tool.params_schema),
            },
        }
        for tool in tools
    ]
    return wire, wire_tools


def _malformed(what: str) -> ProviderError:
    return ProviderError("malformed", f"the chat completions endpoint sent {what}")


def _text_of(content: object) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with content parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    raise _malformed(f"a message content of type {type(content).__name__}")


def from_openai(body: object) -> Completion:
    """The Completion in a chat completions response body; another shape raises malformed."""
    if not isinstance(body, dict):
        raise _malformed(f"a JSON {type(body).__name__} instead of an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _malformed(f"no choices: {clip(json.dumps(body), 160)}")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise _malformed("a choice without a message")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _malformed("tool_calls that are not a list")
    calls: list[ToolCall] = []
    for index, raw in enumerate(raw_calls):
        if not isinstance(raw, dict):
            raise _malformed(f"tool call {index} that is not an object")
        function = raw.get("function")
        if not isinstance(function, dict):
            function = {}
        name = function.get("name")
        call_id = raw.get("id")
        if not isinstance(call_id, str) or not call_id:
            # llama.cpp and Ollama may omit ids; the transcript still needs one to pair results.
            call_id = f"call_{index}_{uuid.uuid4().hex[:12]}"
        args, problem = parse_arguments(function.get("arguments"))
        calls.append(ToolCall(call_id, name if isinstance(name, str) else "", args, problem))
    usage = body.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    return Completion(
        text=_text_of(message.get("content")),
        tool_calls=tuple(calls),
        usage=Usage(_count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))),
        truncated=choice.get("finish_reason") == "length",
    )


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_detail(body: bytes) -> tuple[str, str]:
    """``(message, code)`` from an error body: OpenAI's ``{"error": {...}}``, Ollama's
    ``{"error": "..."}``, or raw text."""
    try:
        data = json.loads(body)
    except ValueError:
        return clip(body.decode("utf-8", "replace")), ""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        code = error.get("code") or error.get("type") or ""
        return clip(str(error.get("message", ""))), str(code)
    if isinstance(error, str):
        return clip(error), ""
    return clip(json.dumps(data)), ""


def client_error_kind(exc: BaseException) -> str:
    """The ``ProviderError`` kind for an aiohttp failure (first match in CLIENT_ERROR_KINDS)."""
    for cls, kind in CLIENT_ERROR_KINDS:
        if isinstance(exc, cls):
            return kind
    return "unreachable"


class OpenAIProvider:
    """A ``Provider`` over an OpenAI-compatible ``/chat/completions`` endpoint."""

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str | None,
        model: str,
        max_tokens: int,
        base_url: str = DEFAULT_BASE_URL,
        backoff: Backoff | None = None,
    ) -> None:
        self._api_key = api_key or None
        self.model = model
        self.max_tokens = max_tokens
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.backoff = backoff or Backoff()
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def url(self) -> str:
        """Where requests go."""
        return f"{self.base_url}/chat/completions"

    def _session_here(self) -> aiohttp.ClientSession:
        # A ClientSession belongs to the loop it was made in; a new loop gets a new session.
        loop = asyncio.get_running_loop()
        if self._session is None or self._session_loop is not loop or self._session.closed:
            self._session = aiohttp.ClientSession()
            self._session_loop = loop
        return self._session

    def build_request(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition]
    ) -> dict[str, Any]:
        """The JSON body for ``messages`` and ``tools``."""
        wire, wire_tools = to_openai(messages, tools)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": wire,
            token_field(self.base_url): self.max_tokens,
            "stream": False,
        }
        if wire_tools:
            request["tools"] = wire_tools
            request["tool_choice"] = "auto"
        return request

    async def complete_with_tools(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *, deadline: float
    ) -> Completion:
        """Text or tool calls for ``messages``; raises ``ProviderError``; ends by ``deadline``."""
        if not messages:
            raise ProviderError("bad_request", "nothing to send: the conversation has no message")
        body = json.dumps(self.build_request(messages, tools)).encode()
        return await complete_logged(
            lambda timeout_s: self._attempt(body, timeout_s),
            deadline=deadline,
            what="openai.chat_completions",
            backoff=self.backoff,
            provider=self.name,
            model=self.model,
        )

    async def _attempt(self, body: bytes, timeout_s: float) -> Completion:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        session = self._session_here()
        try:
            async with asyncio.timeout(timeout_s):
                async with session.post(
                    self.url,
                    data=body,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=timeout_s),
                ) as response:
                    status = response.status
                    raw = await response.read()
                    response_headers = dict(response.headers)
        except TimeoutError:
            raise ProviderError(
                "timeout", f"{self.url} did not answer within {timeout_s:.1f}s"
            ) from None
        except aiohttp.ClientError as exc:
            message = f"cannot talk to {self.url}: {type(exc).__name__}: {exc}"
            message = scrub(message, self._api_key)
            raise ProviderError(client_error_kind(exc), clip(message)) from None
        if status >= 400:
            raise self._status_error(status, raw, response_headers)
        try:
            parsed = json.loads(raw)
        except ValueError:
            raise _malformed(
                f"HTTP {status} with a body that is not JSON: "
                f"{clip(raw.decode('utf-8', 'replace'), 120)!r}; check brain.base_url"
            ) from None
        return from_openai(parsed)

    def _status_error(self, status: int, raw: bytes, headers: dict[str, str]) -> ProviderError:
        said, code = _error_detail(raw)
        kind = status_kind(status, code)
        if kind == "auth":
            # A refused key is often echoed back partly masked: never repeat the body.
            message = (
                f"{self.url} refused the credentials (HTTP {status}): check the "
                "openai_api_key secret"
            )
        else:
            message = f"{self.url} answered HTTP {status}" + (f" {code}" if code else "")
            message += f": {said}" if said else ""
        return ProviderError(kind, scrub(message, self._api_key), parse_retry_after(headers))

    async def aclose(self) -> None:
        """Close the HTTP session."""
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()
        self._session_loop = None
