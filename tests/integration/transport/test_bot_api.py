"""The Bot API client against the fake Bot API on loopback: sending, retries, fatal errors."""

from __future__ import annotations

import json
import socket
import traceback

import pytest
import structlog

from shelldon.transport.render import pre
from shelldon.transport.telegram import BotApi, RetryPolicy
from shelldon.transport.telegram_errors import (
    BadRequest,
    Conflict,
    NetworkError,
    ServerError,
    Unauthorized,
)
from tests.fakes.fake_telegram import FakeTelegram
from tests.integration.transport.support import FakeClock, run

OWNER = 7
QUICK = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)


def _api(tg: FakeTelegram, clock: FakeClock | None = None, token: str | None = None) -> BotApi:
    if clock is None:
        return BotApi(token or tg.token, api_base=tg.api_base, retry=QUICK)
    return BotApi(
        token or tg.token, api_base=tg.api_base, retry=QUICK, sleep=clock.sleep, clock=clock
    )


def test_tool_output_full_of_script_tags_arrives_verbatim() -> None:
    output = "<script>alert(1)</script> && echo '<b>' > /dev/null"

    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            await api.send_message(OWNER, pre(output))
            assert tg.sent[0].parse_mode == "HTML"
            assert tg.sent[0].visible == output
            assert tg.rejected == []

    run(scenario())


def test_unparseable_html_is_resent_once_as_plain_text() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            with structlog.testing.capture_logs() as logs:
                message_id = await api.send_message(OWNER, "<b>unclosed &amp; broken")
            assert [m for m, _ in tg.rejected] == ["sendMessage"]
            assert "can't parse entities" in tg.rejected[0][1]
            assert len(tg.sent) == 1
            assert tg.sent[0].parse_mode is None
            assert tg.sent[0].text == "unclosed & broken"
            assert tg.sent[0].message_id == message_id
            assert [e["event"] for e in logs] == ["telegram.html_refused_sent_plain"]

    run(scenario())


def test_other_bad_requests_are_not_resent() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            with pytest.raises(BadRequest, match="too long"):
                await api.send_message(OWNER, "x" * 5000)
            assert tg.calls.count("sendMessage") == 1

    run(scenario())


def test_server_errors_and_bad_gateways_are_retried_until_success() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with FakeTelegram() as tg, _api(tg, clock) as api:
            tg.fail_next("sendMessage", 500)
            tg.fail_next("sendMessage", 502, raw_body=b"<html>nginx</html>")
            await api.send_message(OWNER, "hello")
            assert tg.calls.count("sendMessage") == 3
            assert [s.visible for s in tg.sent] == ["hello"]
            assert len(clock.slept) == 2 and clock.slept[1] > 0

    run(scenario())


def test_server_errors_past_the_attempts_raise() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with FakeTelegram() as tg, _api(tg, clock) as api:
            tg.fail_next("sendMessage", 500, times=10)
            with pytest.raises(ServerError):
                await api.send_message(OWNER, "hello")
            assert tg.calls.count("sendMessage") == QUICK.attempts

    run(scenario())


def test_a_429_burst_is_waited_out_and_nothing_is_lost() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with FakeTelegram() as tg, _api(tg, clock) as api:
            tg.fail_next("sendMessage", 429, retry_after=3, times=3)
            await api.send_message(OWNER, "after the flood")
            assert [s.visible for s in tg.sent] == ["after the flood"]
            assert sum(clock.slept) >= 9
            # Flood control holds every call, not just the one that met it.
            tg.fail_next("sendChatAction", 429, retry_after=5)
            before = clock.now
            await api.send_chat_action(OWNER)
            await api.send_message(OWNER, "next")
            assert clock.now - before >= 5

    run(scenario())


def test_dropped_connection_mid_poll_is_retried() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        async with FakeTelegram() as tg, _api(tg, clock) as api:
            tg.queue_message(OWNER, "still here")
            tg.drop_polls = 2
            updates = await api.get_updates(None, 1)
            assert [u["message"]["text"] for u in updates] == ["still here"]
            assert tg.calls.count("getUpdates") == 3

    run(scenario())


def test_long_poll_asks_only_for_messages_and_callbacks() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            assert await api.get_updates(None, 0) == []
            assert tg.polls[0]["allowed_updates"] == ["message", "callback_query"]

    run(scenario())


def test_refused_connection_is_a_network_error_without_the_token() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        api = BotApi(
            FakeTelegram().token,
            api_base=f"http://127.0.0.1:{port}",
            retry=QUICK,
            sleep=clock.sleep,
            clock=clock,
        )
        async with api:
            with structlog.testing.capture_logs() as logs, pytest.raises(NetworkError) as caught:
                await api.call("getMe")
        assert FakeTelegram().token not in str(caught.value)
        assert FakeTelegram().token not in json.dumps(logs, default=str)
        assert len(clock.slept) == QUICK.attempts - 1

    run(scenario())


def test_wrong_token_is_fatal_with_one_clear_log_line_and_no_token() -> None:
    wrong = "654321:WRONG-token-WRONG-token-WRONG-tok"

    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg, token=wrong) as api:
            with structlog.testing.capture_logs() as logs, pytest.raises(Unauthorized) as caught:
                await api.call("getMe")
            assert caught.value.fatal and caught.value.exit_status == 78
            errors = [e for e in logs if e["log_level"] == "error"]
            assert [e["event"] for e in errors] == ["telegram.fatal"]
            assert "telegram_token" in errors[0]["error"]
            for secret in (wrong, tg.token):
                assert secret not in json.dumps(logs, default=str)
                assert secret not in str(caught.value)
            assert tg.calls == []  # refused before any method ran, and never retried

    run(scenario())


def test_another_instance_polling_is_fatal_conflict() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            tg.fail_next("getUpdates", 409)
            with structlog.testing.capture_logs() as logs, pytest.raises(Conflict) as caught:
                await api.get_updates(None, 1)
            assert caught.value.exit_status == 75
            assert "another instance" in str(caught.value)
            assert [e["event"] for e in logs if e["log_level"] == "error"] == ["telegram.fatal"]
            assert tg.calls.count("getUpdates") == 1

    run(scenario())


def test_invalid_command_names_are_refused_by_telegram() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            with pytest.raises(BadRequest, match="BOT_COMMAND_INVALID"):
                await api.set_my_commands([("Bad-Name", "no")])
            await api.set_my_commands([("budget", "Turns left today")])
            assert tg.commands == [{"command": "budget", "description": "Turns left today"}]

    run(scenario())


def test_oversized_callback_data_is_refused_by_telegram() -> None:
    keyboard = {"inline_keyboard": [[{"text": "x", "callback_data": "y" * 65}]]}

    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            with pytest.raises(BadRequest, match="BUTTON_DATA_INVALID"):
                await api.send_message(OWNER, "pick", reply_markup=keyboard)

    run(scenario())


def test_edit_drops_the_keyboard_and_a_repeated_edit_is_harmless() -> None:
    keyboard = {"inline_keyboard": [[{"text": "✅ Approve", "callback_data": "a"}]]}

    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            message_id = await api.send_message(OWNER, "approve?", reply_markup=keyboard)
            await api.close_message(OWNER, message_id, "<b>✅ Approved</b>")
            await api.close_message(OWNER, message_id, "<b>✅ Approved</b>")
            message = tg.message(OWNER, message_id)
            assert message.reply_markup is None and message.visible == "✅ Approved"
            assert len(tg.edits) == 1

    run(scenario())


def test_document_arrives_with_its_bytes_and_caption() -> None:
    async def scenario() -> None:
        async with FakeTelegram() as tg, _api(tg) as api:
            await api.send_document(OWNER, "tool.py", b"def run():\n    return '<ok>'\n",
                                    caption="the <b>code</b>")  # fmt: skip
            assert tg.documents[0]["filename"] == "tool.py"
            assert tg.documents[0]["content"] == b"def run():\n    return '<ok>'\n"
            assert tg.documents[0]["chat_id"] == OWNER

    run(scenario())


def test_network_error_carries_no_foreign_context_that_could_name_the_url() -> None:
    async def scenario() -> None:
        clock = FakeClock()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        api = BotApi(
            FakeTelegram().token,
            api_base=f"http://127.0.0.1:{port}",
            retry=RetryPolicy(attempts=1),
            sleep=clock.sleep,
            clock=clock,
        )
        async with api:
            with pytest.raises(NetworkError) as caught:
                await api.call("getMe")
        assert caught.value.__context__ is None and caught.value.__cause__ is None
        rendered = "".join(traceback.format_exception(caught.value))
        assert FakeTelegram().token not in rendered

    run(scenario())
