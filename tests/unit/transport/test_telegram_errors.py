"""The Bot API client's error hierarchy: foreign errors and replies mapped, tokens scrubbed.

Pattern from httpx's test that every httpcore exception is mapped: an aiohttp upgrade that
adds an exception class fails here until someone decides what it means for us.
"""

from __future__ import annotations

import inspect
import traceback

import aiohttp
import pytest

from shelldon.transport import telegram_errors
from shelldon.transport.telegram import BotApi, RetryPolicy
from shelldon.transport.telegram_errors import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidEndpoint,
    NetworkError,
    RetryAfter,
    ServerError,
    TelegramError,
    Unauthorized,
    interpret_reply,
    translate_error,
)
from tests.fakes.fake_telegram import TEST_TOKEN

URL = f"https://api.telegram.org/bot{TEST_TOKEN}/getUpdates"


def _aiohttp_errors() -> list[type[BaseException]]:
    return sorted(
        (
            cls
            for _, cls in inspect.getmembers(aiohttp, inspect.isclass)
            if issubclass(cls, aiohttp.ClientError)
        ),
        key=lambda cls: cls.__name__,
    )


def _bare(cls: type[BaseException]) -> BaseException:
    exc = cls.__new__(cls)
    exc.args = (f"failed for {URL}",)
    return exc


def test_every_aiohttp_client_error_is_mapped_explicitly() -> None:
    mapped = {foreign for foreign, _ in telegram_errors._TRANSLATIONS}
    missing = [cls.__name__ for cls in _aiohttp_errors() if cls not in mapped]
    assert missing == []


@pytest.mark.parametrize("cls", _aiohttp_errors(), ids=lambda cls: cls.__name__)
def test_each_aiohttp_error_becomes_our_error_without_the_token(
    cls: type[BaseException],
) -> None:
    ours = translate_error(_bare(cls), TEST_TOKEN)
    expected = dict(telegram_errors._TRANSLATIONS)[cls]
    assert type(ours) is expected
    assert TEST_TOKEN not in str(ours)


def test_timeouts_and_os_errors_are_network_errors() -> None:
    assert type(translate_error(TimeoutError())) is NetworkError
    assert type(translate_error(ConnectionRefusedError(111, "refused"))) is NetworkError


def test_invalid_url_carrying_the_token_is_scrubbed_and_fatal() -> None:
    error = translate_error(aiohttp.InvalidURL(URL), TEST_TOKEN)
    assert isinstance(error, InvalidEndpoint) and error.fatal
    assert TEST_TOKEN not in str(error) and "telegram.api_base" in str(error)


def test_token_shaped_text_is_scrubbed_even_when_the_token_is_unknown() -> None:
    assert TEST_TOKEN not in str(ServerError(f"proxy said {URL}"))


def test_traceback_of_a_translated_error_has_no_token() -> None:
    async_error: TelegramError
    try:
        try:
            raise aiohttp.InvalidURL(URL)
        except aiohttp.InvalidURL as exc:
            raise translate_error(exc, TEST_TOKEN) from None
    except TelegramError as exc:
        async_error = exc
    assert TEST_TOKEN not in "".join(traceback.format_exception(async_error))


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, b'{"ok":false,"error_code":400,"description":"Bad Request: chat not found"}',
         BadRequest),
        (401, b'{"ok":false,"error_code":401,"description":"Unauthorized"}', Unauthorized),
        (404, b'{"ok":false,"error_code":404,"description":"Not Found"}', Unauthorized),
        (403, b'{"ok":false,"error_code":403,"description":"Forbidden: bot was blocked"}',
         Forbidden),
        (409, b'{"ok":false,"error_code":409,"description":"Conflict: terminated"}', Conflict),
        (500, b'{"ok":false,"error_code":500,"description":"Internal"}', ServerError),
        (502, b"<html>Bad Gateway</html>", ServerError),
        (200, b"<html>captive portal</html>", ServerError),
        (413, b"<html>too large</html>", BadRequest),
        (200, b'{"ok":false}', ServerError),
        (200, b"[1, 2]", ServerError),
    ],
)  # fmt: skip
def test_bot_api_replies_map_to_errors(status: int, body: bytes, expected: type) -> None:
    with pytest.raises(expected):
        interpret_reply(status, body)


def test_flood_control_carries_retry_after() -> None:
    body = b'{"ok":false,"error_code":429,"description":"Too Many","parameters":{"retry_after":7}}'
    with pytest.raises(RetryAfter) as caught:
        interpret_reply(429, body)
    assert caught.value.retry_after == 7.0


def test_ok_reply_returns_its_result() -> None:
    assert interpret_reply(200, b'{"ok":true,"result":{"message_id":3}}') == {"message_id": 3}


def test_only_token_and_instance_problems_are_fatal() -> None:
    fatal = {cls for cls in vars(telegram_errors).values() if inspect.isclass(cls)
             and issubclass(cls, TelegramError) and cls.fatal}  # fmt: skip
    assert fatal == {Unauthorized, Conflict, InvalidEndpoint}
    assert Unauthorized.exit_status == 78 and Conflict.exit_status == 75


def test_malformed_token_is_refused_without_echoing_it() -> None:
    with pytest.raises(InvalidEndpoint) as caught:
        BotApi("not a token/../x")
    assert "not a token" not in str(caught.value)


def test_backoff_grows_with_jitter_and_stays_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0)
    delays = [policy.backoff(n) for n in range(8)]
    assert 0.5 <= delays[0] <= 1.0
    assert all(4.0 <= d <= 8.0 for d in delays[3:])
    assert len({policy.backoff(5) for _ in range(20)}) > 1


def test_client_repr_has_no_token() -> None:
    assert TEST_TOKEN not in repr(BotApi(TEST_TOKEN))
