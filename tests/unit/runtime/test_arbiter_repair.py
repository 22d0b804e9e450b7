"""The arbiter's rules for "🔧 Try to fix" / "Drop" on a failed gate's card: only the owner's
tap on a parked offer starts a repair turn, it needs the slot and the daily budget like a
scheduled turn, and the round cap is checked again from the offer the store gave back."""

from __future__ import annotations

from shelldon.config import LimitsSettings
from shelldon.contracts import Decision, InboundMessage, encode
from shelldon.rules.arbiter import Arbiter, budget_day
from shelldon.rules.commands import owners_of
from shelldon.rules.effects import (
    BeginTurn,
    DropRepair,
    Effect,
    Pump,
    Say,
    SettleTap,
    SpendBudget,
    TakeRepair,
    TakeRow,
)
from shelldon.rules.inbox_plan import InboxView, inbox_view
from shelldon.rules.replies import (
    EXPIRED,
    QUEUED_REPAIR,
    REPAIR_BUDGET_SPENT,
    REPAIR_BUSY,
    REPAIR_CAPPED,
)
from shelldon.store import RepairOffer

OWNER, STRANGER, CHAT = 7, 666, 70
NOW = 1_700_000_000.0
OFFER = "p0123456789abcdef"


def arbiter(**limits: object) -> Arbiter:
    return Arbiter(LimitsSettings(**limits), owners_of([OWNER], console=False))  # type: ignore[arg-type]


def view(*events: object, spent: int = 0) -> InboxView:
    rows = tuple((i, encode(e)) for i, e in enumerate(events, start=1))
    return InboxView(rows, NOW, repairs=frozenset({OFFER}), spent_today=spent)


def tap(approved: bool | None = True, user: int = OWNER) -> Decision:
    return Decision(CHAT, user, OFFER, approved)


def offer(round_: int = 0, report: str = "1 failed") -> RepairOffer:
    return RepairOffer(OFFER, CHAT, "echo_len", round_, b"def run(): ...\n", b"", "", report)


def of(kind: type, effects: list[Effect]) -> list[Effect]:
    return [e for e in effects if isinstance(e, kind)]


def test_the_store_reports_untaken_offers_as_repairs() -> None:
    seen = inbox_view([], [("repair", OFFER), ("promotion", "p2")], [], 0, NOW)
    assert seen.repairs == {OFFER} and seen.promotions == {"p2"}


def test_try_to_fix_takes_the_offer_and_holds_the_slot() -> None:
    a = arbiter()
    effects = a.on_inbox(view(tap()))
    (take,) = of(TakeRepair, effects)
    assert isinstance(take, TakeRepair) and take.decision.turn_id == OFFER
    assert take.turn_id.startswith("r") and take.turn_id != OFFER
    assert a.busy == OFFER
    # A chat message arriving with it waits: the slot is the repair's.
    assert of(BeginTurn, a.on_inbox(view(InboundMessage(CHAT, OWNER, "hi")))) == []


def test_drop_takes_the_offer_without_a_turn() -> None:
    a = arbiter()
    effects = a.on_inbox(view(tap(approved=False)))
    assert effects == [TakeRow(1), DropRepair(tap(approved=False))]
    assert a.busy is None
    # A malformed tap (approved None) is a Drop, never a fix.
    assert of(DropRepair, arbiter().on_inbox(view(tap(approved=None))))


def test_a_strangers_tap_on_an_offer_decides_nothing() -> None:
    a = arbiter()
    assert a.on_inbox(view(tap(user=STRANGER))) == [TakeRow(1)]
    assert a.busy is None


def test_while_a_turn_runs_the_tap_is_queued_and_starts_the_fix_when_the_slot_frees() -> None:
    a = arbiter()
    a.on_inbox(view(InboundMessage(CHAT, OWNER, "first")))
    effects = a.on_inbox(view(tap()))
    # Accepted: its row stays in the inbox (no TakeRow), the card says it will happen.
    assert effects == [SettleTap(tap(), QUEUED_REPAIR, final=False)]
    assert a.on_inbox(view(tap())) == []  # looked at again while still busy: nothing new
    a.busy = None  # the running turn ended
    (take_row, take) = a.on_inbox(view(tap()))
    assert take_row == TakeRow(1) and isinstance(take, TakeRepair)


def test_a_spent_budget_keeps_the_card_and_starts_nothing() -> None:
    a = arbiter(daily_turn_budget=3)
    effects = a.on_inbox(view(tap(), spent=3))
    assert effects == [TakeRow(1), Say(CHAT, REPAIR_BUDGET_SPENT)]
    assert a.busy is None


def test_a_taken_offer_starts_one_budgeted_repair_turn() -> None:
    a = arbiter()
    a.on_inbox(view(tap()))
    effects = a.on_repair_taken(tap(), "rturn", offer(round_=0), spent_today=0, now=NOW)
    settle, spend, begin = effects
    assert isinstance(settle, SettleTap) and "Trying to fix echo_len" in settle.outcome
    assert settle.final  # the card's last word: its keyboard goes
    assert spend == SpendBudget(budget_day(NOW))
    assert isinstance(begin, BeginTurn)
    assert (begin.turn_id, begin.chat_id, begin.source) == ("rturn", CHAT, "repair")
    assert "[repair round 1 of 2]" in begin.text and "1 failed" in begin.text
    # The conversation keeps the tap, not the gate's text.
    assert "Try to fix" in begin.record and "1 failed" not in begin.record
    assert a.busy == "rturn"


def test_an_offer_gone_or_past_the_cap_starts_nothing() -> None:
    a = arbiter()
    a.on_inbox(view(tap()))
    assert a.on_repair_taken(tap(), "r1", None, 0, NOW) == [SettleTap(tap(), EXPIRED), Pump()]
    assert a.busy is None
    a.on_inbox(view(tap()))
    capped = a.on_repair_taken(tap(), "r2", offer(round_=2), 0, NOW)
    assert capped == [SettleTap(tap(), REPAIR_CAPPED), Pump()]
    assert a.busy is None


def test_the_budget_is_checked_again_when_the_offer_is_taken() -> None:
    a = arbiter(daily_turn_budget=1)
    a.on_inbox(view(tap()))
    effects = a.on_repair_taken(tap(), "r1", offer(), spent_today=1, now=NOW)
    assert effects == [SettleTap(tap(), REPAIR_BUDGET_SPENT), Pump()]
    assert of(BeginTurn, effects) == [] and a.busy is None


def test_a_slot_taken_meanwhile_is_not_shared() -> None:
    a = arbiter()
    a.busy = "t-other"  # the turn actor restarted and another turn holds the slot
    effects = a.on_repair_taken(tap(), "r1", offer(), 0, NOW)
    assert effects == [SettleTap(tap(), REPAIR_BUSY), Pump()]
    assert a.busy == "t-other"


def test_no_rounds_means_no_repair() -> None:
    a = arbiter(max_repair_rounds=0)
    a.on_inbox(view(tap()))
    assert of(BeginTurn, a.on_repair_taken(tap(), "r1", offer(round_=0), 0, NOW)) == []


def test_an_expired_repair_offer_says_no_fix_was_tried() -> None:
    from shelldon.rules.arbiter import expired_cards
    from shelldon.rules.effects import ExpireCard
    from shelldon.rules.replies import EXPIRED_REPAIR
    from shelldon.store import Pending

    gone = Pending("repair", "offer-1", CHAT, "echo_len", NOW - 60, NOW)
    (card,) = expired_cards([gone], NOW)
    assert isinstance(card, ExpireCard) and card.outcome == EXPIRED_REPAIR
    assert "offer to fix echo_len" in card.notice and "tried nothing" in card.notice
