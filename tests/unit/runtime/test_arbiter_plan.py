"""The arbiter's inbox decisions: decisions and commands now, one turn, then busy."""

from __future__ import annotations

from shelldon.contracts import Decision, InboundMessage, Remember, encode
from shelldon.rules.arbiter import budget_day
from shelldon.rules.commands import command_of
from shelldon.rules.inbox_plan import plan_inbox

OWNERS = frozenset({1})


def rows(*events: object) -> list[tuple[int, bytes]]:
    return [(i, encode(e)) for i, e in enumerate(events, start=1)]


def chat(text: str) -> InboundMessage:
    return InboundMessage(1, 1, text)


def test_decisions_and_commands_never_wait_behind_a_turn() -> None:
    plan = plan_inbox(
        rows(chat("hello"), Decision(1, 1, "t9", True), chat("/pending")),
        busy=True,
        max_queue=8,
        owners=OWNERS,
    )
    assert [e.item_id for e in plan.now] == [2, 3]
    assert plan.start is None and plan.busy == []


def test_the_oldest_chat_message_starts_when_free() -> None:
    plan = plan_inbox(rows(chat("first"), chat("second")), busy=False, max_queue=8, owners=OWNERS)
    assert plan.start is not None and plan.start.item_id == 1


def test_past_the_queue_bound_the_newest_are_busy() -> None:
    plan = plan_inbox(
        rows(*(chat(str(i)) for i in range(5))), busy=True, max_queue=2, owners=OWNERS
    )
    assert [e.item_id for e in plan.busy] == [3, 4, 5]


def test_garbage_and_foreign_contracts_are_dropped_with_a_reason() -> None:
    plan = plan_inbox(
        [(1, b"\xff\x00junk"), *rows(Remember("x"))], busy=False, max_queue=8, owners=OWNERS
    )
    assert [item for item, _ in plan.bad] == [1, 1]
    assert "does not belong" in plan.bad[1][1]


def test_commands_are_recognised_with_and_without_the_bot_name() -> None:
    assert command_of("/restore weather") == ("restore", "weather")
    assert command_of("/Tools@shelldon_bot") == ("tools", "")
    assert command_of("restore weather") is None
    assert command_of("/") is None and command_of("/@bot") is None


def test_anything_shaped_like_a_command_is_one_known_or_not() -> None:
    # Unknown names are answered locally (owner_commands), never sent to the model.
    assert command_of("/rm -rf") == ("rm", "-rf")
    assert command_of("  /Usage\nplease  ") == ("usage", "please")
    assert command_of("/tmp/x is full") is None  # a path is chat
    assert command_of("/ hello") is None and command_of("/über") is None
    assert command_of("/" + "a" * 33) is None  # longer than Telegram allows a command


def test_chat_from_anyone_but_an_owner_is_dropped_with_a_reason() -> None:
    plan = plan_inbox(
        rows(InboundMessage(1, 2, "hi"), Decision(1, 2, "t9", True)),
        busy=False,
        max_queue=8,
        owners=OWNERS,
    )
    assert plan.start is None and plan.now == []
    assert [item for item, _ in plan.bad] == [1, 2]
    assert "no owner" in plan.bad[0][1]


def test_budget_day_is_the_utc_date() -> None:
    assert budget_day(0) == "1970-01-01"
