"""Telegram Bot API client over one aiohttp session: ``await api.call(method, **params)``.

Errors are ``shelldon.transport.telegram_errors``'s. The bot token travels only in request
URLs; every error text is scrubbed there, and no log line names a URL.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import structlog

from shelldon.transport.render import to_plain
from shelldon.transport.telegram_errors import (
    FOREIGN_ERRORS,
    BadRequest,
    FileTooBig,
    InvalidEndpoint,
    NetworkError,
    RetryAfter,
    ServerError,
    TelegramError,
    interpret_reply,
    translate_error,
)

log = structlog.get_logger(__name__)

DEFAULT_API_BASE = "https://api.telegram.org"
ALLOWED_UPDATES = ("message", "callback_query")

_TOKEN_SHAPE = re.compile(r"^[0-9]{1,20}:[A-Za-z0-9_-]{1,200}$")
# What getFile's file_path may be ("photos/file_12.jpg"): relative, no "..", no query, so a
# hostile reply cannot point the download (which carries the token) anywhere else.
_FILE_PATH = re.compile(
    r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}(/[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}){0,3}$"
)
_CHUNK = 64 * 1024


def plain_file_path(path: str) -> bool:
    """Whether getFile's ``path`` is a plain relative one, safe to put after the token."""
    return bool(_FILE_PATH.match(path)) and ".." not in path.split("/")


_PARSE_ERROR = "can't parse entities"
_NOT_MODIFIED = "message is not modified"

Sleep = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often a call is tried, and how long to back off between tries (seconds)."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 300.0

    def backoff(self, attempt: int) -> float:
        """Exponential backoff with jitter for retry number ``attempt`` (0-based)."""
        ceiling = min(self.max_delay, self.base_delay * 2.0**attempt)
        # Half fixed, half random: spreads restarts without ever retrying instantly.
        return ceiling / 2 + random.uniform(0, ceiling / 2)  # noqa: S311 - jitter, not crypto


class BotApi:
    """The Bot API over one aiohttp session; retries, flood control and token hygiene inside."""

    def __init__(
        self,
        token: str,
        *,
        api_base: str = DEFAULT_API_BASE,
        retry: RetryPolicy | None = None,
        request_timeout_s: float = 30.0,
        sleep: Sleep = asyncio.sleep,
        clock: Clock = time.monotonic,
    ) -> None:
        if not _TOKEN_SHAPE.match(token):
            raise InvalidEndpoint(
                "the bot token does not look like <digits>:<letters>; check telegram_token"
            )
        if not api_base.startswith(("http://", "https://")):
            raise InvalidEndpoint(f"api_base {api_base!r} must start with http:// or https://")
        self._token = token
        self._base = api_base.rstrip("/")
        self._retry = retry or RetryPolicy()
        self._timeout_s = request_timeout_s
        self._sleep = sleep
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._not_before = 0.0

    def __repr__(self) -> str:
        return f"BotApi(api_base={self._base!r})"

    async def __aenter__(self) -> BotApi:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session (idempotent)."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    async def call(
        self,
        method: str,
        /,
        *,
        timeout_s: float | None = None,
        upload: tuple[str, str, bytes] | None = None,
        **params: Any,
    ) -> Any:
        """``method``'s ``result`` for ``params`` (None values dropped; with ``upload``, a file
        as (field, filename, content), as form data). 5xx and network failures are retried with
        backoff and jitter, a 429 waits its ``retry_after`` (and so does every other call
        meanwhile); other errors raise at once."""
        params = {k: v for k, v in params.items() if v is not None}
        for attempt in itertools.count():
            delay = self._not_before - self._clock()
            if delay > 0:
                await self._sleep(delay)
            try:
                return await self._request(method, params, upload, timeout_s)
            except RetryAfter as exc:
                wait = exc.retry_after
                if wait > self._retry.max_retry_after or attempt + 1 >= self._retry.attempts:
                    log.warning("telegram.flood_control_gave_up", method=method, retry_after=wait)
                    raise
                self._not_before = max(self._not_before, self._clock() + wait)
                log.warning("telegram.flood_control", method=method, retry_after=wait)
            except (NetworkError, ServerError) as exc:
                if attempt + 1 >= self._retry.attempts:
                    log.warning("telegram.gave_up", method=method, error=str(exc))
                    raise
                delay = self._retry.backoff(attempt)
                log.info("telegram.retry", method=method, error=str(exc), delay_s=round(delay, 3))
                await self._sleep(delay)
            except TelegramError as exc:
                if exc.fatal:
                    log.error(
                        "telegram.fatal",
                        method=method,
                        kind=type(exc).__name__,
                        error=str(exc),
                        exit_status=exc.exit_status,
                    )
                raise

    async def _request(
        self,
        method: str,
        params: Mapping[str, Any],
        upload: tuple[str, str, bytes] | None,
        timeout_s: float | None,
    ) -> Any:
        # The URL (it holds the token) is never bound to a local: no traceback shows it.
        timeout = aiohttp.ClientTimeout(total=timeout_s or self._timeout_s)
        failure: TelegramError | None = None
        try:
            if upload is None:
                request = self._http().post(self._url(method), json=params, timeout=timeout)
            else:
                form = aiohttp.FormData()
                for key, value in params.items():
                    form.add_field(key, value if isinstance(value, str) else json.dumps(value))
                field, filename, content = upload
                form.add_field(field, content, filename=filename)
                request = self._http().post(self._url(method), data=form, timeout=timeout)
            async with request as response:
                status = response.status
                body = await response.read()
        except FOREIGN_ERRORS as exc:
            failure = translate_error(exc, self._token)
        if failure is not None:
            # Raised outside the handler, so it carries no __context__ naming the URL.
            raise failure
        return interpret_reply(status, body)

    def _url(self, method: str) -> str:
        return f"{self._base}/bot{self._token}/{method}"

    async def get_file(self, file_id: str) -> str:
        """getFile: the ``file_path`` to download ``file_id`` from; one that is not plain
        (``plain_file_path``) is refused as a bad reply."""
        result = await self.call("getFile", file_id=file_id)
        path = result.get("file_path") if isinstance(result, dict) else None
        if not isinstance(path, str) or not plain_file_path(path):
            raise ServerError("getFile returned no usable file_path")
        return path

    async def download(self, file_path: str, max_bytes: int, timeout_s: float) -> bytes:
        """The file at ``file_path`` (from ``get_file``), into memory only: at most
        ``max_bytes`` (``FileTooBig`` as soon as more is declared or read), within
        ``timeout_s``, not compressed, not redirected. Never retried: the caller decides."""
        if not plain_file_path(file_path):
            raise BadRequest("refused to download a file_path that is not plain")
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        failure: TelegramError | None = None
        body = bytearray()
        status, too_big, encoded = 0, 0, False
        try:
            # A compressed body could grow past any cap in one chunk: ask for none, take none.
            request = self._http().get(
                f"{self._base}/file/bot{self._token}/{file_path}",
                timeout=timeout,
                allow_redirects=False,
                headers={"Accept-Encoding": "identity"},
            )
            async with request as response:
                status = response.status
                declared = response.content_length
                encoded = response.headers.get("Content-Encoding", "identity") != "identity"
                readable = status == 200 and not encoded  # else nothing read: see below
                if readable and declared is not None and declared > max_bytes:
                    too_big = declared
                elif readable:
                    async for chunk in response.content.iter_chunked(_CHUNK):
                        body += chunk
                        if len(body) > max_bytes:  # stop at cap + 1: never read the rest
                            too_big = len(body)
                            break
        except FOREIGN_ERRORS as exc:
            failure = translate_error(exc, self._token)
        if failure is not None:
            raise failure
        if too_big:
            raise FileTooBig(too_big)
        if status != 200:
            raise BadRequest(f"the file download answered HTTP {status}")
        if encoded:
            raise BadRequest("the file download came compressed, which is refused")
        return bytes(body)

    async def get_updates(self, offset: int | None, timeout_s: int) -> list[Any]:
        """Long-poll for updates at or after ``offset`` (which confirms all before it)."""
        result = await self.call(
            "getUpdates",
            timeout_s=timeout_s + 15,
            offset=offset,
            timeout=timeout_s,
            limit=100,
            allowed_updates=list(ALLOWED_UPDATES),
        )
        if not isinstance(result, list):
            raise ServerError("getUpdates returned no list")
        return result

    async def send_message(
        self,
        chat_id: int,
        text: str,
        *,
        reply_markup: Mapping[str, Any] | None = None,
    ) -> int:
        """Send HTML ``text`` (as plain text if Telegram cannot parse it); returns its id."""
        params: dict[str, Any] = {
            "chat_id": chat_id,
            "reply_markup": reply_markup,
            "link_preview_options": {"is_disabled": True},
        }
        return _message_id(await self._call_html("sendMessage", text, params))

    async def _call_html(self, method: str, text: str, params: dict[str, Any]) -> Any:
        """``method`` with HTML ``text``; if Telegram cannot parse it, once more as plain text."""
        try:
            return await self.call(method, text=text, parse_mode="HTML", **params)
        except BadRequest as exc:
            if _PARSE_ERROR not in exc.description:
                raise
            log.warning(
                "telegram.html_refused_sent_plain", chat_id=params["chat_id"], error=str(exc)
            )
            return await self.call(method, text=to_plain(text), **params)

    async def send_document(
        self, chat_id: int, filename: str, content: bytes, *, caption: str | None = None
    ) -> int:
        """Send ``content`` as a file named ``filename``; returns the message id."""
        result = await self.call(
            "sendDocument",
            upload=("document", filename, content),
            chat_id=chat_id,
            caption=caption,
            parse_mode="HTML" if caption else None,
        )
        return _message_id(result)

    async def close_message(self, chat_id: int, message_id: int, text: str | None) -> None:
        """Drop a message's inline keyboard and, unless ``text`` is None, replace its text with
        HTML ``text``."""
        params: dict[str, Any] = {
            "chat_id": chat_id,
            "message_id": message_id,
            "reply_markup": {"inline_keyboard": []},
        }
        try:
            if text is None:
                await self.call("editMessageReplyMarkup", **params)
            else:
                await self._call_html("editMessageText", text, params)
        except BadRequest as exc:
            # An edit it already has, or no keyboard left to drop (a retried decision), is done.
            if _NOT_MODIFIED not in exc.description:
                raise

    async def answer_callback_query(self, callback_query_id: str, text: str | None = None) -> None:
        """Stop the client's spinner on a tapped button, optionally with a short notice."""
        await self.call(
            "answerCallbackQuery",
            callback_query_id=callback_query_id,
            text=text[:200] if text else None,
        )

    async def set_my_commands(self, commands: Sequence[tuple[str, str]]) -> None:
        """Register the command menu: ``(name, description)`` pairs, names without ``/``."""
        await self.call(
            "setMyCommands",
            commands=[{"command": name, "description": about} for name, about in commands],
        )

    async def send_chat_action(self, chat_id: int, action: str = "typing") -> None:
        """Show ``action`` (typing...) in the chat for about five seconds."""
        await self.call("sendChatAction", chat_id=chat_id, action=action)


def _message_id(result: Any) -> int:
    if isinstance(result, dict) and type(result.get("message_id")) is int:
        return int(result["message_id"])
    raise ServerError("the Bot API returned no message_id for a sent message")
