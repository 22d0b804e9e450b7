"""A fake Telegram Bot API on 127.0.0.1 that speaks the real wire format, for tests.

``/bot<token>/<method>`` with JSON, form or multipart bodies; replies ``{"ok": true,
"result": ...}`` or ``{"ok": false, "error_code": N, "description": "..."}`` like Telegram.
It keeps Telegram's rules that matter to us: getUpdates confirms everything below ``offset``
and long-polls up to ``timeout``; HTML must parse ("can't parse entities"); a text holds at
most 4096 UTF-16 units; callback_data at most 64 bytes; command names ``[a-z0-9_]{1,32}``;
a callback query is answered once; a wrong token is 401; a message past Telegram's 48 hours
(``age``) "can't be edited", a deleted one (``delete``) is "not found". Tests queue updates,
tap buttons of sent messages, script failures (429 with retry_after, 5xx, 409 on concurrent
polls, dropped connections) and read what the bot sent.

    async with FakeTelegram() as tg:
        api = BotApi(tg.token, api_base=tg.api_base)
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from aiohttp import BodyPartReader, web

from tests.fakes.telegram_files import FileServing, ServedFile

TEST_TOKEN = "123456:ABC-DEF1234ghIkl-zyx57W2v1u123ew11"
BOT_USER = {"id": 42, "is_bot": True, "first_name": "shelldon", "username": "shelldon_bot"}

_HTML_TAGS = frozenset(
    {
        "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler",
        "a", "code", "pre", "blockquote", "tg-emoji",
    }
)  # fmt: skip
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9A-Fa-f]{1,6});")
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)((?:\s[^<>]*)?)>")
_COMMAND = re.compile(r"[a-z0-9_]{1,32}")
MAX_TEXT = 4096
MAX_CALLBACK_DATA = 64


class _BadRequest(Exception):
    def __init__(self, description: str, status: int = 400) -> None:
        super().__init__(description)
        self.description = description
        self.status = status


MAX_CAPTION = 1024
"""Telegram's limit on a document's caption, after entity parsing (UTF-16 code units)."""


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def parse_html(text: str) -> str:
    """The visible text of Telegram HTML, or raise ``_BadRequest`` as Telegram would."""
    out: list[str] = []
    stack: list[str] = []
    i = 0
    raw = text.encode("utf-8", "surrogatepass")
    while i < len(text):
        ch = text[i]
        offset = len(text[:i].encode("utf-8", "surrogatepass"))
        if ch == "<":
            match = _TAG.match(text, i)
            if match is None:
                raise _BadRequest(
                    f"Bad Request: can't parse entities: unclosed start tag at byte offset {offset}"
                )
            closing, name, _attrs = match.groups()
            name = name.lower()
            if name not in _HTML_TAGS:
                raise _BadRequest(
                    f'Bad Request: can\'t parse entities: unsupported start tag "{name}" at byte'
                    f" offset {offset}"
                )
            if closing:
                if not stack or stack[-1] != name:
                    raise _BadRequest(
                        "Bad Request: can't parse entities: unmatched end tag at byte offset"
                        f' {offset}, expected "</{stack[-1] if stack else ""}>", found'
                        f' "</{name}>"'
                    )
                stack.pop()
            else:
                stack.append(name)
            i = match.end()
        elif ch == "&":
            match = _ENTITY.match(text, i)
            if match is None:
                raise _BadRequest(
                    f"Bad Request: can't parse entities: unsupported entity at byte offset {offset}"
                )
            out.append(html.unescape(match.group(0)))
            i = match.end()
        elif ch == ">":
            raise _BadRequest(
                f"Bad Request: can't parse entities: unexpected '>' at byte offset {offset}"
            )
        else:
            out.append(ch)
            i += 1
    if stack:
        raise _BadRequest(
            f"Bad Request: can't parse entities: can't find end tag corresponding to start tag"
            f' "{stack[-1]}" (text is {len(raw)} bytes)'
        )
    return "".join(out)


def _visible(text: Any, parse_mode: Any) -> str:
    if not isinstance(text, str):
        raise _BadRequest("Bad Request: message text is empty")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise _BadRequest("Bad Request: strings must be encoded in UTF-8") from None
    visible = parse_html(text) if parse_mode == "HTML" else text
    if not visible.strip():
        raise _BadRequest("Bad Request: message text is empty")
    if _utf16_len(visible.strip()) > MAX_TEXT:
        raise _BadRequest("Bad Request: message is too long")
    return visible


def _check_markup(markup: Any) -> dict[str, Any] | None:
    if markup is None:
        return None
    if isinstance(markup, str):
        try:
            markup = json.loads(markup)
        except ValueError:
            raise _BadRequest("Bad Request: can't parse reply keyboard markup JSON") from None
    rows = markup.get("inline_keyboard") if isinstance(markup, dict) else None
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise _BadRequest("Bad Request: can't parse inline keyboard button: field is not an array")
    for row in rows:
        for button in row:
            if not isinstance(button, dict) or not isinstance(button.get("text"), str):
                raise _BadRequest("Bad Request: can't parse inline keyboard button")
            data = button.get("callback_data")
            if not isinstance(data, str) or not 1 <= len(data.encode()) <= MAX_CALLBACK_DATA:
                raise _BadRequest("Bad Request: BUTTON_DATA_INVALID")
    return markup if rows else None


@dataclass
class Failure:
    """A scripted reply for the next call of one method."""

    status: int
    description: str
    retry_after: float | None = None
    raw_body: bytes | None = None


@dataclass
class Sent:
    """A message the bot sent (and its current state, after edits)."""

    chat_id: int
    message_id: int
    text: str
    parse_mode: str | None
    reply_markup: dict[str, Any] | None
    visible: str

    def buttons(self) -> list[dict[str, Any]]:
        """The message's inline buttons, left to right, top to bottom."""
        if not self.reply_markup:
            return []
        return [b for row in self.reply_markup["inline_keyboard"] for b in row]


@dataclass
class FakeTelegram(FileServing):
    """The fake server and everything it saw; see the module docstring (files: getFile and
    downloads, ``tests.fakes.telegram_files``)."""

    token: str = TEST_TOKEN
    conflict_on_concurrent_polls: bool = False
    pending: list[dict[str, Any]] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)
    documents: list[dict[str, Any]] = field(default_factory=list)
    answers: list[dict[str, Any]] = field(default_factory=list)
    chat_actions: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    polls: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)
    drop_polls: int = 0
    api_base: str = ""
    files: dict[str, ServedFile] = field(default_factory=dict)
    downloads: list[str] = field(default_factory=list)
    streamed: int = 0
    _failures: dict[str, deque[Failure]] = field(default_factory=dict)
    _messages: dict[tuple[int, int], Sent] = field(default_factory=dict)
    _open_callbacks: set[str] = field(default_factory=set)
    _too_old: set[tuple[int, int]] = field(default_factory=set)
    _next_update_id: int = 1000
    _next_message_id: int = 1
    _next_callback: int = 1
    _polls_in_flight: int = 0
    _closing: bool = False
    _arrived: asyncio.Condition | None = None
    _runner: web.AppRunner | None = None

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        """Serve on 127.0.0.1 on a free port; returns the api_base to give the client."""
        self._arrived = asyncio.Condition()
        app = web.Application(client_max_size=60 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._dispatch)
        app.router.add_route("GET", "/file/bot{token}/{path:.*}", self._download)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.api_base = f"http://127.0.0.1:{port}"
        return self.api_base

    async def close(self) -> None:
        """Stop serving; long polls in flight return at once rather than run out their time."""
        self._closing = True
        if self._arrived is not None:
            async with self._arrived:
                self._arrived.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeTelegram:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ------------------------------------------------------------ scripting

    def fail_next(
        self,
        method: str,
        status: int,
        description: str = "",
        *,
        retry_after: float | None = None,
        raw_body: bytes | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` calls of ``method`` with this error instead."""
        text = description or {
            429: "Too Many Requests: retry after",
            500: "Internal Server Error",
            502: "Bad Gateway",
            409: "Conflict: terminated by other getUpdates request; make sure that only one bot"
            " instance is running",
        }.get(status, f"Error {status}")
        if status == 429 and retry_after is not None and not description:
            text = f"Too Many Requests: retry after {retry_after:g}"
        queue = self._failures.setdefault(method, deque())
        for _ in range(times):
            queue.append(Failure(status, text, retry_after, raw_body))

    def queue_update(self, update: dict[str, Any]) -> int:
        """Queue a raw update (``update_id`` assigned when missing); returns its id."""
        if "update_id" not in update:
            update = {"update_id": self._next_update_id, **update}
        uid = update["update_id"]
        if isinstance(uid, int):
            self._next_update_id = max(self._next_update_id, uid + 1)
        self.pending.append(update)
        self._wake()
        return uid if isinstance(uid, int) else -1

    def queue_message(
        self, user_id: int, text: str, *, chat_id: int | None = None, chat_type: str = "private"
    ) -> int:
        """Queue a text message from ``user_id`` (in their private chat by default)."""
        chat = chat_id if chat_id is not None else user_id
        message = {
            "message_id": self._new_message_id(),
            "date": int(time.time()),
            "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
            "chat": {"id": chat, "type": chat_type},
            "text": text,
        }
        return self.queue_update({"message": message})

    def queue_media(self, user_id: int, field: str, value: Any, caption: str = "") -> int:
        """Queue a message without text from ``user_id``: a ``photo``, ``voice``, ``sticker``,
        ``document``… (``field`` as the Bot API names it, holding ``value``)."""
        message: dict[str, Any] = {
            "message_id": self._new_message_id(),
            "date": int(time.time()),
            "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
            "chat": {"id": user_id, "type": "private"},
            field: value,
        }
        if caption:
            message["caption"] = caption
        return self.queue_update({"message": message})

    def queue_callback(self, user_id: int, data: Any, message_id: int, chat_id: int) -> str:
        """Queue a tap with raw ``data`` on message ``message_id``; returns the query id."""
        query_id = f"cbq{self._next_callback}"
        self._next_callback += 1
        self._open_callbacks.add(query_id)
        message = {
            "message_id": message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": BOT_USER,
            "text": "",
        }
        self.queue_update(
            {
                "callback_query": {
                    "id": query_id,
                    "from": {"id": user_id, "is_bot": False, "first_name": f"user{user_id}"},
                    "chat_instance": "1",
                    "message": message,
                    "data": data,
                }
            }
        )
        return query_id

    def tap(self, user_id: int, sent: Sent, button: int) -> str:
        """Press button number ``button`` of a message the bot sent; returns the query id."""
        buttons = sent.buttons()
        if button >= len(buttons):
            raise AssertionError(f"message {sent.message_id} has no button {button} any more")
        return self.queue_callback(
            user_id, buttons[button]["callback_data"], sent.message_id, sent.chat_id
        )

    def age(self, chat_id: int, message_id: int) -> None:
        """Make a sent message older than 48 hours: Telegram no longer lets the bot edit it."""
        self._too_old.add((chat_id, message_id))

    def delete(self, chat_id: int, message_id: int) -> None:
        """Delete a sent message, as the owner can in their client."""
        self._messages.pop((chat_id, message_id), None)

    def message(self, chat_id: int, message_id: int) -> Sent:
        """The current state of a message the bot sent."""
        return self._messages[(chat_id, message_id)]

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        """Wait until ``predicate()`` holds (checked as requests arrive), or fail the test."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("the fake Bot API never saw what the test waited for")
            await asyncio.sleep(0.005)

    # ------------------------------------------------------------ serving

    def _wake(self) -> None:
        if self._arrived is None:
            return
        condition = self._arrived

        async def notify() -> None:
            async with condition:
                condition.notify_all()

        with contextlib.suppress(RuntimeError):  # no loop: nobody can be waiting
            asyncio.get_running_loop().create_task(notify())

    def _new_message_id(self) -> int:
        self._next_message_id += 1
        return self._next_message_id

    @staticmethod
    def _reply(result: Any) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    def _error(status: int, description: str, retry_after: float | None = None) -> web.Response:
        body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
        if retry_after is not None:
            body["parameters"] = {"retry_after": retry_after}
        return web.json_response(body, status=status)

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            body = await request.json()
            if isinstance(body, dict):
                params.update(body)
        elif request.content_type == "multipart/form-data":
            reader = await request.multipart()
            async for part in reader:
                assert isinstance(part, BodyPartReader)
                name = part.name or ""
                if part.filename:
                    params[name] = {
                        "filename": part.filename,
                        "content": bytes(await part.read()),
                    }
                else:
                    params[name] = await part.text()
        elif request.can_read_body:
            params.update(await request.post())
        return params

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        if request.match_info["token"] != self.token:
            return self._error(401, "Unauthorized")
        self.calls.append(method)
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return self._error(404, "Not Found")
        queue = self._failures.get(method)
        if queue:
            failure = queue.popleft()
            if failure.raw_body is not None:
                return web.Response(status=failure.status, body=failure.raw_body)
            return self._error(failure.status, failure.description, failure.retry_after)
        try:
            params = await self._params(request)
            result = await handler(request, params)
        except _BadRequest as exc:
            self.rejected.append((method, exc.description))
            return self._error(exc.status, exc.description)
        if isinstance(result, web.StreamResponse):
            return result
        return self._reply(result)

    # ------------------------------------------------------------ methods

    async def _m_getMe(self, request: web.Request, params: dict[str, Any]) -> Any:
        return BOT_USER

    async def _m_getUpdates(self, request: web.Request, params: dict[str, Any]) -> Any:
        offset = _as_int(params.get("offset"))
        timeout = float(params.get("timeout") or 0)
        allowed = params.get("allowed_updates")
        self.polls.append({"offset": offset, "timeout": timeout, "allowed_updates": allowed})
        if self.conflict_on_concurrent_polls and self._polls_in_flight:
            raise _BadRequest(
                "Conflict: terminated by other getUpdates request; make sure that only one bot"
                " instance is running",
                status=409,
            )
        if offset is not None:
            self.pending = [u for u in self.pending if _uid(u) >= offset]
        if self.drop_polls:
            self.drop_polls -= 1
            # Like a NAT dropping a long poll: the connection dies without a reply.
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=200)
        self._polls_in_flight += 1
        try:
            deadline = time.monotonic() + timeout
            assert self._arrived is not None
            while True:
                ready = [u for u in self.pending if offset is None or _uid(u) >= offset]
                if ready or self._closing or time.monotonic() >= deadline:
                    return ready[: int(params.get("limit") or 100)]
                async with self._arrived:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(
                            self._arrived.wait(), max(0.0, deadline - time.monotonic())
                        )
        finally:
            self._polls_in_flight -= 1

    async def _m_sendMessage(self, request: web.Request, params: dict[str, Any]) -> Any:
        chat_id = _as_int(params.get("chat_id"))
        if chat_id is None:
            raise _BadRequest("Bad Request: chat not found")
        parse_mode = params.get("parse_mode")
        visible = _visible(params.get("text"), parse_mode)
        markup = _check_markup(params.get("reply_markup"))
        sent = Sent(chat_id, self._new_message_id(), params["text"], parse_mode, markup, visible)
        self.sent.append(sent)
        self._messages[(chat_id, sent.message_id)] = sent
        return {
            "message_id": sent.message_id,
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "text": visible,
        }

    async def _m_sendDocument(self, request: web.Request, params: dict[str, Any]) -> Any:
        chat_id = _as_int(params.get("chat_id"))
        document = params.get("document")
        if chat_id is None or not isinstance(document, dict):
            raise _BadRequest("Bad Request: there is no document in the request")
        caption = params.get("caption")
        if caption:
            shown = parse_html(caption) if params.get("parse_mode") == "HTML" else caption
            if _utf16_len(shown.strip()) > MAX_CAPTION:
                raise _BadRequest("Bad Request: message caption is too long")
        if not document.get("content"):
            raise _BadRequest("Bad Request: file must be non-empty")
        message_id = self._new_message_id()
        self.documents.append(
            {"chat_id": chat_id, "message_id": message_id, "caption": caption, **document}
        )
        return {"message_id": message_id, "chat": {"id": chat_id, "type": "private"}}

    def _editable(self, params: dict[str, Any]) -> Sent:
        key = (_as_int(params.get("chat_id")) or 0, _as_int(params.get("message_id")) or 0)
        sent = self._messages.get(key)
        if sent is None:
            raise _BadRequest("Bad Request: message to edit not found")
        if key in self._too_old:
            raise _BadRequest("Bad Request: message can't be edited")
        return sent

    async def _m_editMessageReplyMarkup(self, request: web.Request, params: dict[str, Any]) -> Any:
        sent = self._editable(params)
        markup = _check_markup(params.get("reply_markup"))
        if markup == sent.reply_markup:
            raise _BadRequest(
                "Bad Request: message is not modified: specified new message content and reply"
                " markup are exactly the same as a current content and reply markup of the"
                " message"
            )
        sent.reply_markup = markup
        self.edits.append(
            {"chat_id": sent.chat_id, "message_id": sent.message_id, "reply_markup": markup}
        )
        return {"message_id": sent.message_id, "chat": {"id": sent.chat_id, "type": "private"}}

    async def _m_editMessageText(self, request: web.Request, params: dict[str, Any]) -> Any:
        sent = self._editable(params)
        chat_id, message_id = sent.chat_id, sent.message_id
        parse_mode = params.get("parse_mode")
        visible = _visible(params.get("text"), parse_mode)
        markup = _check_markup(params.get("reply_markup"))
        if visible == sent.visible and markup == sent.reply_markup:
            raise _BadRequest(
                "Bad Request: message is not modified: specified new message content and reply"
                " markup are exactly the same as a current content and reply markup of the"
                " message"
            )
        sent.text, sent.parse_mode, sent.visible = params["text"], parse_mode, visible
        sent.reply_markup = markup
        self.edits.append({"chat_id": chat_id, "message_id": message_id, "text": params["text"]})
        return {"message_id": message_id, "chat": {"id": chat_id, "type": "private"}}

    async def _m_answerCallbackQuery(self, request: web.Request, params: dict[str, Any]) -> Any:
        query_id = params.get("callback_query_id")
        if query_id not in self._open_callbacks:
            raise _BadRequest(
                "Bad Request: query is too old and response timeout expired or query ID is invalid"
            )
        text = params.get("text")
        if isinstance(text, str) and len(text) > 200:
            raise _BadRequest("Bad Request: MESSAGE_TOO_LONG")
        self._open_callbacks.discard(query_id)
        self.answers.append({"callback_query_id": query_id, "text": text})
        return True

    async def _m_setMyCommands(self, request: web.Request, params: dict[str, Any]) -> Any:
        commands = params.get("commands")
        if isinstance(commands, str):
            commands = json.loads(commands)
        if not isinstance(commands, list) or len(commands) > 100:
            raise _BadRequest("Bad Request: can't parse commands JSON object")
        for item in commands:
            name = item.get("command") if isinstance(item, dict) else None
            about = item.get("description") if isinstance(item, dict) else None
            if not isinstance(name, str) or not _COMMAND.fullmatch(name):
                raise _BadRequest("Bad Request: BOT_COMMAND_INVALID")
            if not isinstance(about, str) or not 1 <= len(about) <= 256:
                raise _BadRequest("Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands = list(commands)
        return True

    async def _m_sendChatAction(self, request: web.Request, params: dict[str, Any]) -> Any:
        self.chat_actions.append(
            {"chat_id": _as_int(params.get("chat_id")), "action": params.get("action")}
        )
        return True


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _uid(update: dict[str, Any]) -> int:
    uid = update.get("update_id")
    # JSON true is not a number: like any non-number id it sits below every offset.
    return uid if type(uid) is int else -1
