"""A fake OpenAI-compatible Chat Completions API on 127.0.0.1 that checks requests like the real
one.

``POST /v1/chat/completions``. With ``api_key`` set it refuses (401) a missing or wrong
``Authorization: Bearer``; with ``api_key=None`` it is a keyless local server (llama.cpp,
Ollama) and records whether a key was sent anyway. It refuses (400) what OpenAI refuses: a
``tool`` message whose ``tool_call_id`` is not among the previous assistant message's
``tool_calls``, an assistant's tool calls not all answered before the next other message,
``function.arguments`` that is not a string, ``tool_choice`` without ``tools``, unknown roles,
malformed tool definitions. Canned answers are queued with ``reply_*``.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
from typing import Any

from tests.fakes.canned_server import Canned, CannedServer, ReceivedRequest

_ids = itertools.count(1)
ROLES = ("system", "developer", "user", "assistant", "tool")
DATA_URL = re.compile(r"^data:image/(jpeg|png|webp|gif);base64,(.*)$", re.DOTALL)


def _check_parts(i: int, role: str, parts: list[Any]) -> str | None:
    """Why OpenAI would refuse a list of content parts (text, and image_url for a user)."""
    for j, part in enumerate(parts):
        at = f"messages[{i}].content[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            if not isinstance(part.get("text"), str):
                return f"{at}.text: expected a string"
        elif kind == "image_url":
            if role != "user":
                return f"{at}: image_url is only supported in user messages"
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else None
            match = DATA_URL.match(url) if isinstance(url, str) else None
            if match is None:
                return f"{at}.image_url.url: Invalid image URL"
            try:
                base64.b64decode(match.group(2), validate=True)
            except (binascii.Error, ValueError):
                return f"{at}: Invalid image: the base64 data could not be decoded"
        else:
            return f"{at}.type: Invalid value {kind!r}"
    return None


def images_in(body: object) -> list[bytes]:
    """The decoded bytes of every image part in a request body, in order."""
    found = []
    for msg in body.get("messages", []) if isinstance(body, dict) else []:
        content = msg.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                match = DATA_URL.match(part["image_url"]["url"])
                if match is not None:
                    found.append(base64.b64decode(match.group(2)))
    return found


def error_body(message: str, kind: str = "invalid_request_error", code: str | None = None) -> Any:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def _check_tool_calls(i: int, calls: object) -> str | None:
    if not isinstance(calls, list) or not calls:
        return f"messages[{i}].tool_calls: expected a non-empty array"
    for j, call in enumerate(calls):
        at = f"messages[{i}].tool_calls[{j}]"
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            return f"{at}.id: Missing required parameter"
        if call.get("type") != "function":
            return f"{at}.type: must be 'function'"
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return f"{at}.function.name: Missing required parameter"
        if not isinstance(function.get("arguments"), str):
            got = type(function.get("arguments")).__name__
            return f"{at}.function.arguments: expected a string, got {got}"
    return None


def check_chat_request(body: object) -> str | None:
    """Why OpenAI would refuse this request body, or None when it would accept it."""
    if not isinstance(body, dict):
        return "We could not parse the JSON body of your request."
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "you must provide a model parameter"
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return "'tools': empty array. Expected an array with minimum length 1"
        for i, tool in enumerate(tools):
            function = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type") != "function" or not isinstance(function, dict):
                return f"tools[{i}]: expected a function tool"
            if not isinstance(function.get("name"), str) or not function["name"]:
                return f"tools[{i}].function.name: Missing required parameter"
            params = function.get("parameters", {"type": "object"})
            if not isinstance(params, dict) or params.get("type") != "object":
                return f"Invalid schema for function '{function['name']}': must be type object"
    if "tool_choice" in body and not tools:
        return (
            "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are "
            "specified."
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages': empty array. Expected an array with minimum length 1"
    pending: list[str] = []
    answerable: set[str] = set()
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or msg.get("role") not in ROLES:
            return f"messages[{i}].role: Invalid value. Supported: {', '.join(ROLES)}"
        role = msg["role"]
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in answerable:
                return (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceeding message with 'tool_calls' (messages[{i}], {call_id!r})."
                )
            answerable.discard(call_id)
            pending.remove(call_id)
            if not isinstance(msg.get("content"), str | list):
                return f"messages[{i}].content: expected a string"
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(pending)}"
            )
        answerable = set()
        if role == "assistant" and msg.get("tool_calls") is not None:
            problem = _check_tool_calls(i, msg["tool_calls"])
            if problem:
                return problem
            pending = [c["id"] for c in msg["tool_calls"]]
            answerable = set(pending)
            if msg.get("content") is not None and not isinstance(msg["content"], str):
                return f"messages[{i}].content: expected a string or null"
        elif not isinstance(msg.get("content"), str | list):
            return f"messages[{i}].content: expected a string"
        if isinstance(msg.get("content"), list):
            problem = _check_parts(i, role, msg["content"])
            if problem:
                return problem
    if pending:
        return (
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            f"to each 'tool_call_id'. The following tool_call_ids did not have response "
            f"messages: {', '.join(pending)}"
        )
    return None


class FakeOpenAI(CannedServer):
    """The fake Chat Completions API; ``base_url`` ends in ``/v1`` like OpenAI's."""

    routes = ("/v1/chat/completions",)

    def __init__(self, api_key: str | None = "sk-test-openai-0123456789abcdef") -> None:
        super().__init__()
        self.api_key = api_key

    @property
    def base_url(self) -> str:
        """What to configure as ``brain.base_url``."""
        return f"{self.origin}/v1"

    def check(self, request: ReceivedRequest) -> Canned | None:
        """401 for a wrong key, 400 for a request OpenAI refuses."""
        wanted = f"Bearer {self.api_key}"
        if self.api_key is not None and request.headers.get("Authorization") != wanted:
            return Canned(
                401,
                error_body(
                    "Incorrect API key provided: sk-****. You can find your API key at ...",
                    code="invalid_api_key",
                ),
            )
        try:
            body = request.json()
        except ValueError:
            return Canned(400, error_body("We could not parse the JSON body of your request."))
        problem = check_chat_request(body)
        if problem:
            return Canned(400, error_body(problem))
        return None

    def when_empty(self, request: ReceivedRequest) -> Canned:
        """A loud 400 so a test that forgot a reply fails with a clear message."""
        return Canned(400, error_body("fake: no canned response left"))

    # -- canned answers ------------------------------------------------------------------------

    @staticmethod
    def completion(
        message: dict[str, Any], finish_reason: str, usage: tuple[int, int] | None = (11, 6)
    ) -> dict[str, Any]:
        """A chat completion response body."""
        body: dict[str, Any] = {
            "id": f"chatcmpl-fake{next(_ids)}",
            "object": "chat.completion",
            "created": 1_790_000_000,
            "model": "gpt-fake",
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        }
        if usage is not None:
            body["usage"] = {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            }
        return body

    def reply_text(self, text: str, *, finish_reason: str = "stop", delay_s: float = 0.0) -> None:
        """Queue a text answer."""
        body = self.completion({"role": "assistant", "content": text}, finish_reason)
        self.push(Canned(200, body, delay_s=delay_s))

    def reply_tool_calls(
        self, *calls: tuple[str, Any], text: str | None = None, with_ids: bool = True
    ) -> list[str]:
        """Queue an answer with ``tool_calls`` in order; a dict argument is JSON-encoded, a str
        is sent verbatim (to send malformed JSON). Returns the ids."""
        ids, wire = [], []
        for name, args in calls:
            call_id = f"call_fake{next(_ids)}"
            ids.append(call_id)
            arguments = args if isinstance(args, str) else json.dumps(args)
            call: dict[str, Any] = {
                "type": "function",
                "function": {"name": name, "arguments": arguments},
            }
            if with_ids:
                call["id"] = call_id
            wire.append(call)
        message = {"role": "assistant", "content": text, "tool_calls": wire}
        self.push(Canned(200, self.completion(message, "tool_calls")))
        return ids

    def reply_error(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue an API error."""
        kind = "server_error" if status >= 500 else "invalid_request_error"
        self.push(Canned(status, error_body(message, kind, code), headers=headers or {}))

    def reply_raw(self, status: int, body: bytes, content_type: str = "text/html") -> None:
        """Queue a raw body."""
        self.push(Canned(status, raw_body=body, content_type=content_type))

    def reply_json(self, body: Any, *, delay_s: float = 0.0) -> None:
        """Queue any JSON body with status 200 (a server's own dialect)."""
        self.push(Canned(200, body, delay_s=delay_s))
