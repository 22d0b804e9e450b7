"""A fake Anthropic Messages API on 127.0.0.1 that checks requests the way the real one does.

``POST /v1/messages``. It refuses (401) a missing or wrong key (``x-api-key`` or
``Authorization: Bearer``) and (400, ``invalid_request_error``) what the real API refuses:
roles that do not alternate or do not start with ``user``, a ``system`` role inside
``messages``, empty text blocks, a ``tool_use`` not answered by a ``tool_result`` in the very
next user message, a ``tool_result`` answering no ``tool_use`` of the message before it,
tool_result blocks after text in a user message, tool blocks without ``tools`` defined,
malformed tool definitions. Canned answers are queued with ``reply_*``.

Usage::

    with FakeAnthropic() as fake:
        fake.reply_tool_calls(("list_dir", {"path": "."}))
        provider = AnthropicProvider(api_key=fake.api_key, base_url=fake.base_url, ...)
"""

from __future__ import annotations

import base64
import binascii
import itertools
import re
from typing import Any

from tests.fakes.canned_server import Canned, CannedServer, ReceivedRequest

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,128}$")
TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
IMAGE_MAGIC = {
    "image/jpeg": (b"\xff\xd8\xff",),
    "image/png": (b"\x89PNG",),
    "image/gif": (b"GIF87a", b"GIF89a"),
    "image/webp": (b"RIFF",),
}
_ids = itertools.count(1)


def error_body(kind: str, message: str) -> dict[str, Any]:
    """The API's error envelope."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def _check_blocks(index: int, role: str, content: object) -> str | None:
    where = f"messages.{index}"
    if isinstance(content, str):
        return None if content else f"{where}: text content blocks must be non-empty"
    if not isinstance(content, list) or not content:
        return f"{where}: content must be a non-empty string or list of blocks"
    seen_other = False
    for j, block in enumerate(content):
        at = f"{where}.content.{j}"
        if not isinstance(block, dict):
            return f"{at}: must be an object"
        kind = block.get("type")
        if kind == "text":
            if not isinstance(block.get("text"), str) or not block["text"]:
                return f"{at}: text content blocks must be non-empty"
            seen_other = True
        elif kind == "image":
            problem = _check_image(at, role, block.get("source"))
            if problem:
                return problem
            seen_other = True
        elif kind == "tool_use":
            if role != "assistant":
                return f"{at}: tool_use blocks are only allowed in assistant messages"
            if not TOOL_ID.match(str(block.get("id", ""))):
                return f"{at}.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input"), dict):
                return f"{at}: tool_use needs a string name and an object input"
        elif kind == "tool_result":
            if role != "user":
                return f"{at}: tool_result blocks are only allowed in user messages"
            if seen_other:
                return f"{at}: tool_result blocks must come before any other content"
            if not isinstance(block.get("tool_use_id"), str):
                return f"{at}.tool_use_id: Field required"
            if "is_error" in block and not isinstance(block["is_error"], bool):
                return f"{at}.is_error: Input should be a valid boolean"
            if not isinstance(block.get("content", ""), str | list):
                return f"{at}.content: Input should be a string or a list of blocks"
        else:
            return f"{at}.type: unsupported block type {kind!r}"
    return None


def _check_image(at: str, role: str, source: object) -> str | None:
    """What the real API says of an image block it would refuse."""
    if role != "user":
        return f"{at}: image blocks are only allowed in user messages"
    if not isinstance(source, dict) or source.get("type") != "base64":
        return f"{at}.source.type: Input should be 'base64'"
    media_type = source.get("media_type")
    if media_type not in IMAGE_MAGIC:
        return f"{at}.source.media_type: Input should be one of {', '.join(IMAGE_MAGIC)}"
    try:
        data = base64.b64decode(str(source.get("data", "")), validate=True)
    except (binascii.Error, ValueError):
        return f"{at}.source.data: invalid base64 data"
    if not data.startswith(IMAGE_MAGIC[media_type]):
        return f"{at}.source: Could not process image (not the {media_type} it claims)"
    return None


def images_in(body: object) -> list[bytes]:
    """The decoded bytes of every image block in a request body, in order."""
    found = []
    messages = body.get("messages", []) if isinstance(body, dict) else []
    for msg in messages:
        for block in _blocks(msg.get("content"), "image"):
            found.append(base64.b64decode(block["source"]["data"]))
    return found


def _blocks(content: object, kind: str) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def check_messages_request(body: object) -> str | None:
    """Why the real API would refuse this request body, or None when it would accept it."""
    if not isinstance(body, dict):
        return "request body must be a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: Field required"
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return "max_tokens: Field required (a positive integer)"
    system = body.get("system", "")
    if not isinstance(system, str | list):
        return "system: Input should be a string or a list of text blocks"
    tools = body.get("tools", [])
    if not isinstance(tools, list):
        return "tools: Input should be a valid list"
    names = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not TOOL_NAME.match(str(tool.get("name", ""))):
            return f"tools.{i}.name: String should match pattern '^[a-zA-Z0-9_-]{{1,128}}$'"
        if tool["name"] in names:
            return f"tools: Tool names must be unique ({tool['name']})"
        names.add(tool["name"])
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            return f"tools.{i}.input_schema.type: Input should be 'object'"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    uses_tools = False
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            return f"messages.{i}: must be an object"
        role = msg.get("role")
        if role not in ("user", "assistant"):
            return (
                f"messages.{i}.role: Input should be 'user' or 'assistant' "
                "(the system prompt goes in the top-level system parameter)"
            )
        if i == 0 and role != "user":
            return "messages: first message must use the user role"
        if i > 0 and messages[i - 1].get("role") == role:
            return "messages: roles must alternate between user and assistant"
        problem = _check_blocks(i, role, msg.get("content"))
        if problem:
            return problem
        content = msg.get("content")
        uses = _blocks(content, "tool_use")
        results = _blocks(content, "tool_result")
        uses_tools = uses_tools or bool(uses or results)
        if results:
            previous = messages[i - 1].get("content") if i > 0 else None
            asked = {b.get("id") for b in _blocks(previous, "tool_use")}
            for block in results:
                if block.get("tool_use_id") not in asked:
                    return (
                        f"messages.{i}.content: unexpected `tool_use_id` found in `tool_result` "
                        f"blocks: {block.get('tool_use_id')}. Each `tool_result` block must have "
                        "a corresponding `tool_use` block in the previous message."
                    )
        if uses:
            following = messages[i + 1].get("content") if i + 1 < len(messages) else None
            answered = {b.get("tool_use_id") for b in _blocks(following, "tool_result")}
            missing = [b.get("id") for b in uses if b.get("id") not in answered]
            if missing:
                return (
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(map(str, missing))}. Each `tool_use` block "
                    "must have a corresponding `tool_result` block in the next message."
                )
    if uses_tools and not tools:
        return "Requests which include `tool_use` or `tool_result` blocks must define tools."
    return None


class FakeAnthropic(CannedServer):
    """The fake Messages API; ``base_url`` for the SDK, ``api_key`` it accepts."""

    routes = ("/v1/messages",)

    def __init__(self, api_key: str = "sk-ant-test-key-0123456789") -> None:
        super().__init__()
        self.api_key = api_key

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url``."""
        return self.origin

    def check(self, request: ReceivedRequest) -> Canned | None:
        """401 for a wrong key, 400 for a request the real API refuses."""
        given = request.headers.get("x-api-key") or request.headers.get("X-Api-Key")
        bearer = request.headers.get("Authorization", "")
        if given != self.api_key and bearer != f"Bearer {self.api_key}":
            return Canned(401, error_body("authentication_error", "invalid x-api-key"))
        if "anthropic-version" not in {k.lower() for k in request.headers}:
            return Canned(400, error_body("invalid_request_error", "anthropic-version: required"))
        try:
            body = request.json()
        except ValueError:
            return Canned(400, error_body("invalid_request_error", "body is not valid JSON"))
        problem = check_messages_request(body)
        if problem:
            return Canned(400, error_body("invalid_request_error", problem))
        return None

    def when_empty(self, request: ReceivedRequest) -> Canned:
        """A loud 400 so a test that forgot a reply fails with a clear message."""
        return Canned(400, error_body("invalid_request_error", "fake: no canned response left"))

    # -- canned answers ------------------------------------------------------------------------

    @staticmethod
    def message(
        content: list[dict[str, Any]],
        stop_reason: str = "end_turn",
        usage: tuple[int, int] = (12, 7),
    ) -> dict[str, Any]:
        """A Messages API response body."""
        return {
            "id": f"msg_fake_{next(_ids)}",
            "type": "message",
            "role": "assistant",
            "model": "claude-fake",
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        }

    def reply_text(self, text: str, *, stop_reason: str = "end_turn", delay_s: float = 0.0) -> None:
        """Queue a text answer."""
        body = self.message([{"type": "text", "text": text}], stop_reason)
        self.push(Canned(200, body, delay_s=delay_s))

    def reply_tool_calls(
        self, *calls: tuple[str, dict[str, Any]], text: str = "", stop_reason: str = "tool_use"
    ) -> list[str]:
        """Queue an answer with ``tool_use`` blocks (in order); returns their ids."""
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        ids = []
        for name, args in calls:
            call_id = f"toolu_fake_{next(_ids)}"
            ids.append(call_id)
            content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
        self.push(Canned(200, self.message(content, stop_reason)))
        return ids

    def reply_error(
        self,
        status: int,
        kind: str,
        message: str = "",
        *,
        headers: dict[str, str] | None = None,
        delay_s: float = 0.0,
    ) -> None:
        """Queue an API error (``kind`` e.g. rate_limit_error, overloaded_error, api_error)."""
        self.push(
            Canned(
                status, error_body(kind, message or kind), headers=headers or {}, delay_s=delay_s
            )
        )

    def reply_raw(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        """Queue a raw body (a proxy's HTML page, truncated JSON)."""
        self.push(Canned(status, raw_body=body, content_type=content_type))
