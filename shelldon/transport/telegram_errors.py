"""What the Bot API client raises: everything is a ``TelegramError``. Foreign aiohttp/asyncio
errors are translated in one place (``translate_error``), Bot API replies in another
(``interpret_reply``)::

    TelegramError                 base; ``fatal`` says the caller must stop, ``exit_status`` how
    ├── NetworkError              refused / reset / dropped connection, timeout, cut body: retried
    ├── ServerError               5xx, or a reply that is not Bot API JSON: retried
    ├── RetryAfter(retry_after)   429 flood control: every call waits ``retry_after`` seconds
    ├── BadRequest(description)   400 (and other 4xx): the request is wrong; never retried
    │   ├── Forbidden(description)    403: e.g. the owner blocked the bot; never retried
    │   └── FileTooBig(size)          a file download past its cap (stopped at cap + 1 bytes)
    ├── Unauthorized              401/404: the bot token is wrong               (fatal, exit 78)
    ├── Conflict                  409: another instance polls, or a webhook is set (fatal, exit 75)
    └── InvalidEndpoint           telegram.api_base is not a usable URL          (fatal, exit 78)

The bot token travels only in request URLs. aiohttp errors can carry the URL, so every text
that leaves this module is scrubbed, foreign exceptions are raised ``from None``, and no log
line names a URL. The client logs a fatal error once (``telegram.fatal``); the caller exits.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import aiohttp
import structlog

log = structlog.get_logger(__name__)

# A second line of defence for texts that never saw the exact token (foreign messages).
_TOKEN_LIKE = re.compile(r"[0-9]{5,20}:[A-Za-z0-9_-]{20,}")


def scrub(text: str, token: str = "") -> str:
    """``text`` with the bot token (exact, and anything shaped like one) replaced."""
    if token:
        text = text.replace(token, "<token>")
    return _TOKEN_LIKE.sub("<token>", text)


class TelegramError(Exception):
    """A Bot API call failed; ``fatal`` errors mean this process must stop polling."""

    fatal: ClassVar[bool] = False
    exit_status: ClassVar[int] = 1

    def __init__(self, message: str) -> None:
        super().__init__(scrub(message))


class NetworkError(TelegramError):
    """The request did not complete: connection refused, reset or dropped, or a timeout."""


class ServerError(TelegramError):
    """Telegram (or a proxy before it) failed: a 5xx, or a reply that is not Bot API JSON."""


class RetryAfter(TelegramError):
    """Flood control (429): wait ``retry_after`` seconds before the next call."""

    def __init__(self, retry_after: float, message: str = "") -> None:
        super().__init__(message or f"flood control: retry after {retry_after:g} s")
        self.retry_after = retry_after


class BadRequest(TelegramError):
    """The Bot API refused the request as malformed; ``description`` is Telegram's reason."""

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = scrub(description)


class Forbidden(BadRequest):
    """The bot may not act in that chat (403), e.g. the owner blocked it."""


class FileTooBig(BadRequest):
    """A file to download is over the caller's cap; ``size`` is what was seen (declared, or
    read before the download was cut)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"the file is over the cap ({size} bytes seen)")
        self.size = size


class Unauthorized(TelegramError):
    """The bot token was refused (401/404): fix the telegram_token secret and restart."""

    fatal = True
    exit_status = 78  # EX_CONFIG: systemd's RestartPreventExitStatus=78 stops a restart loop


class Conflict(TelegramError):
    """Another instance is polling with this token, or a webhook is set (409)."""

    fatal = True
    exit_status = 75  # EX_TEMPFAIL


class InvalidEndpoint(TelegramError):
    """``telegram.api_base`` (or the token's shape) cannot form a request URL."""

    fatal = True
    exit_status = 78


@contextlib.contextmanager
def unless_fatal(event: str, **context: object) -> Iterator[None]:
    """Log a non-fatal ``TelegramError`` raised in the block as ``event`` (with ``context``,
    e.g. the chat) and go on: for a send whose loss costs only a courtesy. A fatal one is
    raised, for the caller to stop."""
    try:
        yield
    except TelegramError as exc:
        if exc.fatal:
            raise
        log.info(event, error=str(exc), **context)


def _safe_text(exc: BaseException) -> str:
    # Foreign __str__ may depend on attributes a half-built exception lacks.
    try:
        text = str(exc)
    except Exception:
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# Most specific first: the first isinstance match wins. tests/unit/transport pins that every
# exception class aiohttp exports appears here, so an aiohttp upgrade forces a decision.
_TRANSLATIONS: tuple[tuple[type[BaseException], type[TelegramError]], ...] = (
    (aiohttp.InvalidUrlRedirectClientError, ServerError),
    (aiohttp.NonHttpUrlRedirectClientError, ServerError),
    (aiohttp.InvalidUrlClientError, InvalidEndpoint),
    (aiohttp.NonHttpUrlClientError, InvalidEndpoint),
    (aiohttp.InvalidURL, InvalidEndpoint),
    (aiohttp.RedirectClientError, ServerError),
    (aiohttp.TooManyRedirects, ServerError),
    (aiohttp.ContentTypeError, ServerError),
    (aiohttp.ClientHttpProxyError, NetworkError),
    (aiohttp.WSServerHandshakeError, ServerError),
    (aiohttp.ClientResponseError, ServerError),
    (aiohttp.ClientConnectorCertificateError, NetworkError),
    (aiohttp.ClientConnectorSSLError, NetworkError),
    (aiohttp.ClientSSLError, NetworkError),
    (aiohttp.ClientConnectorDNSError, NetworkError),
    (aiohttp.ClientProxyConnectionError, NetworkError),
    (aiohttp.ClientConnectorError, NetworkError),
    (aiohttp.ClientConnectionResetError, NetworkError),
    (aiohttp.ClientOSError, NetworkError),
    (aiohttp.ConnectionTimeoutError, NetworkError),
    (aiohttp.SocketTimeoutError, NetworkError),
    (aiohttp.ServerTimeoutError, NetworkError),
    (aiohttp.ServerDisconnectedError, NetworkError),
    (aiohttp.ServerFingerprintMismatch, NetworkError),
    (aiohttp.ServerConnectionError, NetworkError),
    (aiohttp.ClientConnectionError, NetworkError),
    (aiohttp.ClientPayloadError, NetworkError),
    (aiohttp.UploadAbortedError, NetworkError),
    (aiohttp.ClientError, NetworkError),
    (TimeoutError, NetworkError),  # asyncio.TimeoutError is this class since 3.11
    (OSError, NetworkError),
)

FOREIGN_ERRORS: tuple[type[BaseException], ...] = tuple(cls for cls, _ in _TRANSLATIONS)
"""The foreign exception classes ``call`` catches and translates; anything else is a bug."""


def translate_error(exc: BaseException, token: str = "") -> TelegramError:
    """The ``TelegramError`` for a foreign aiohttp/asyncio/OS error, its text scrubbed."""
    for foreign, ours in _TRANSLATIONS:
        if isinstance(exc, foreign):
            text = scrub(_safe_text(exc), token)
            if ours is InvalidEndpoint:
                text += " (check telegram.api_base)"
            return ours(text)
    return TelegramError(scrub(_safe_text(exc), token))


def error_for(status: int, description: str, retry_after: float | None = None) -> TelegramError:
    """The ``TelegramError`` for a failed Bot API reply with this status and description."""
    if retry_after is not None or status == 429:
        return RetryAfter(retry_after if retry_after is not None else 1.0, description)
    if status in (401, 404):
        return Unauthorized(f"{description} (HTTP {status}): check the telegram_token secret")
    if status == 403:
        return Forbidden(description)
    if status == 409:
        return Conflict(
            f"{description}: another instance is polling with this bot token, or a webhook is"
            " set; stop the other instance (or deleteWebhook) and start again"
        )
    if 400 <= status < 500:
        return BadRequest(description)
    return ServerError(f"{description} (HTTP {status})")


def interpret_reply(status: int, body: bytes) -> Any:
    """The ``result`` of a Bot API reply, or raise the ``TelegramError`` it describes."""
    try:
        payload = json.loads(body)
    except ValueError:
        payload = None
    if not isinstance(payload, dict):
        if 200 <= status < 300:
            raise ServerError(f"HTTP {status} reply is not Bot API JSON")
        raise error_for(status, f"HTTP {status}")
    if payload.get("ok") is True:
        return payload.get("result")
    code = payload.get("error_code")
    if type(code) is not int:
        code = status if status >= 400 else 500
    description = payload.get("description")
    if not isinstance(description, str) or not description:
        description = f"HTTP {code}"
    retry_after: float | None = None
    parameters = payload.get("parameters")
    if isinstance(parameters, dict):
        raw = parameters.get("retry_after")
        if isinstance(raw, int | float) and not isinstance(raw, bool) and raw >= 0:
            retry_after = float(raw)
    raise error_for(code, description, retry_after)
