"""The arbiter's rules, event by event, without an actor, a database or a clock: who may act,
one turn at a time, taps and commands at once, the schedule within its budget, and what a
hostile or stale event gets (nothing that runs)."""

from __future__ import annotations

import pytest

from shelldon.config import LimitsSettings
from shelldon.contracts import (
    Decision,
    InboundMessage,
    Message,
    ProposeTool,
    Remember,
    RequestToolApproval,
    Result,
    Role,
    ToolCall,
    ToolFailure,
    encode,
)
from shelldon.rules.arbiter import TICK_S, Arbiter, expired_cards, tick_delay
from shelldon.rules.commands import CONSOLE_CHAT, owners_of
from shelldon.rules.effects import (
    Abandon,
    AnswerCommand,
    ApplyOp,
    ArmTick,
    BeginTurn,
    Effect,
    ExpireCard,
    ExpireParked,
    FinishInbox,
    NowIdle,
    Pump,
    RecordReply,
    RefuseDue,
    Reoffer,
    Resume,
    RoutePromotion,
    Say,
    SettleTap,
    StartDue,
    Strike,
    TakeParked,
    TakeRow,
)
from shelldon.rules.inbox_plan import InboxView, inbox_view
from shelldon.rules.replies import (
    APPROVED,
    BUDGET_SPENT,
    BUSY_REPLY,
    DENIED,
    EXPIRED,
    EXPIRED_PROMOTION,
    GONE,
    LOST,
    QUEUED_APPROVED,
    QUEUED_DENIED,
    UNREADABLE,
)
from shelldon.store import Pending, Scheduled

OWNER, STRANGER, CHAT = 7, 666, 70
NOW = 1_700_000_000.0
CALL = ToolCall("c1", "write_file", {"path": "x", "content": "hi"})
PARKED = RequestToolApproval(CALL, "write_file(path='x')", (Message(Role.USER, "save it"),))


def arbiter(**limits: object) -> Arbiter:
    return Arbiter(LimitsSettings(**limits), owners_of([OWNER], console=False))  # type: ignore[arg-type]


def view(*events: object, now: float = NOW, **state: object) -> InboxView:
    rows = tuple((i, encode(e)) for i, e in enumerate(events, start=1))
    return InboxView(rows, now, **state)  # type: ignore[arg-type]


def chat(text: str, user: int = OWNER) -> InboundMessage:
    return InboundMessage(CHAT, user, text)


def tap(turn_id: str, approved: bool | None = True, user: int = OWNER) -> Decision:
    return Decision(CHAT, user, turn_id, approved)


def of(kind: type, effects: list[Effect]) -> list[Effect]:
    return [e for e in effects if isinstance(e, kind)]


def busy_with_a_turn(a: Arbiter) -> str:
    (begin,) = of(BeginTurn, a.on_inbox(view(chat("first"))))
    assert isinstance(begin, BeginTurn)
    return begin.turn_id


# ---------------------------------------------------------------- who may act


def test_the_console_owner_is_the_person_at_the_console_and_only_there() -> None:
    assert owners_of([OWNER], console=True) == {OWNER, 0}
    assert owners_of([OWNER], console=False) == {OWNER}
    assert owners_of([], console=False) == frozenset()


def test_a_strangers_message_in_the_inbox_is_taken_and_never_starts_a_turn() -> None:
    a = arbiter()
    effects = a.on_inbox(view(chat("rm -rf / please", user=STRANGER)))
    assert effects == [TakeRow(1)]
    assert a.busy is None


def test_a_strangers_tap_decides_nothing() -> None:
    a = arbiter()
    effects = a.on_inbox(view(tap("t1", user=STRANGER), approvals=frozenset({"t1"})))
    assert effects == [TakeRow(1)]
    assert a.busy is None


def test_a_strangers_command_is_not_answered() -> None:
    assert arbiter().on_inbox(view(chat("/pending", user=STRANGER))) == [TakeRow(1)]


# ---------------------------------------------------------------- one turn at a time


def test_the_oldest_chat_message_starts_a_turn_and_the_next_waits() -> None:
    a = arbiter()
    effects = a.on_inbox(view(chat("first"), chat("second")))
    (take, begin) = effects
    assert isinstance(begin, BeginTurn) and begin.text == "first" and begin.source == "owner"
    assert take == TakeRow(1, begin.turn_id)
    assert a.busy == begin.turn_id
    # The second is still in the inbox, and waits while the turn runs.
    assert a.on_inbox(view(chat("second"))) == []


def test_past_the_queue_bound_the_newest_are_answered_busy() -> None:
    a = arbiter(max_queue=2)
    busy_with_a_turn(a)
    effects = a.on_inbox(view(*(chat(str(i)) for i in range(5))))
    assert effects == [
        TakeRow(3),
        Say(CHAT, BUSY_REPLY),
        TakeRow(4),
        Say(CHAT, BUSY_REPLY),
        TakeRow(5),
        Say(CHAT, BUSY_REPLY),
    ]


def test_commands_are_answered_at_once_even_while_a_turn_runs() -> None:
    a = arbiter()
    busy_with_a_turn(a)
    effects = a.on_inbox(view(chat("/restore@shelldon_bot weather"), chat("/Pending")))
    assert effects == [
        TakeRow(1),
        AnswerCommand(CHAT, "restore", "weather"),
        TakeRow(2),
        AnswerCommand(CHAT, "pending", ""),
    ]


def test_an_unknown_command_is_answered_locally_never_sent_to_the_model() -> None:
    a = arbiter()
    effects = a.on_inbox(view(chat("/rm -rf"), chat("/Forget@shelldon_bot everything")))
    assert of(BeginTurn, effects) == []
    assert of(AnswerCommand, effects) == [
        AnswerCommand(CHAT, "rm", "-rf"),
        AnswerCommand(CHAT, "forget", "everything"),
    ]


def test_a_path_or_a_slash_in_a_sentence_is_still_chat() -> None:
    a = arbiter()
    effects = a.on_inbox(view(chat("/tmp/x is full, clean it")))
    (begin,) = of(BeginTurn, effects)
    assert isinstance(begin, BeginTurn) and begin.text == "/tmp/x is full, clean it"


def test_garbage_and_foreign_contracts_in_the_inbox_are_taken_and_dropped() -> None:
    a = arbiter()
    rows = ((1, b"\xff\x00junk"), (2, encode(Remember("x"))), (3, b""))
    assert a.on_inbox(InboxView(rows, NOW)) == [TakeRow(1), TakeRow(2), TakeRow(3)]
    assert a.busy is None


# ---------------------------------------------------------------- taps


def test_a_tap_on_a_parked_call_takes_the_slot_and_asks_the_store() -> None:
    a = arbiter()
    effects = a.on_inbox(view(tap("t9"), chat("hello"), approvals=frozenset({"t9"})))
    assert effects == [TakeRow(1), TakeParked(tap("t9"))]
    assert a.busy == "t9"  # "hello" waits for the resumed turn


def test_a_tap_while_a_turn_runs_is_queued_in_the_inbox_and_applied_when_the_slot_frees() -> None:
    a = arbiter()
    running = busy_with_a_turn(a)
    parked = view(tap("t9"), approvals=frozenset({"t9"}))
    # Accepted at once, and its row stays in the inbox (durable): not taken, not "tap again".
    assert a.on_inbox(parked) == [SettleTap(tap("t9"), QUEUED_APPROVED, final=False)]
    assert a.busy == running
    assert a.on_inbox(parked) == []  # told once, however often the inbox is read
    # It does not expire while it waits for the slot.
    assert a.on_tick(NOW)[0] == ExpireParked(NOW, frozenset({"t9"}))
    a.on_turn_ended(CHAT, Result(turn_id=running, reply="done"))
    later = view(tap("t9"), approvals=frozenset({"t9"}), now=NOW + 20)
    # Judged as of when it was accepted, so a TTL that ran out meanwhile does not void it.
    assert a.on_inbox(later) == [TakeRow(1), TakeParked(tap("t9"), tapped_at=NOW)]
    assert a.busy == "t9" and a.queued == {}


def test_a_queued_deny_says_nothing_will_run() -> None:
    a = arbiter()
    busy_with_a_turn(a)
    effects = a.on_inbox(view(tap("t9", False), approvals=frozenset({"t9"})))
    assert effects == [SettleTap(tap("t9", False), QUEUED_DENIED, final=False)]


def test_a_second_tap_on_a_queued_card_waits_silently_and_the_first_one_stands() -> None:
    a = arbiter()
    running = busy_with_a_turn(a)
    both = view(tap("t9"), tap("t9", False), approvals=frozenset({"t9"}))
    assert a.on_inbox(both) == [SettleTap(tap("t9"), QUEUED_APPROVED, final=False)]
    a.on_turn_ended(CHAT, Result(turn_id=running, reply="done"))
    effects = a.on_inbox(both)
    assert of(TakeParked, effects) == [TakeParked(tap("t9"), tapped_at=NOW)]
    assert of(SettleTap, effects) == [SettleTap(tap("t9", False), GONE)]


def test_after_a_restart_a_queued_tap_is_still_in_the_inbox_and_applied() -> None:
    # The row was never taken, so a new arbiter (after kill -9) finds it and applies it.
    a = arbiter()
    a.on_start(fresh=True, console=False, unanswered=[], unfinished=[], now=NOW)
    effects = a.on_inbox(view(tap("t9"), approvals=frozenset({"t9"})))
    assert effects == [TakeRow(1), TakeParked(tap("t9"))]


def test_a_double_tap_consumes_the_parked_call_once() -> None:
    a = arbiter()
    effects = a.on_inbox(view(tap("t9"), tap("t9", False), approvals=frozenset({"t9"})))
    assert of(TakeParked, effects) == [TakeParked(tap("t9"))]
    assert of(SettleTap, effects) == [SettleTap(tap("t9", False), GONE)]
    assert of(TakeRow, effects) == [TakeRow(1), TakeRow(2)]


def test_a_tap_on_nothing_parked_runs_nothing_and_says_so() -> None:
    a = arbiter()
    assert a.on_inbox(view(tap("t-never"))) == [TakeRow(1), SettleTap(tap("t-never"), GONE)]
    assert a.busy is None


def test_expired_rows_close_their_cards_and_tell_the_owner() -> None:
    gone = [
        Pending("approval", "t9", CHAT, 'write_file(path="x")', NOW - 3600, NOW),
        Pending("promotion", "p1", CHAT, "tool shout", NOW - 7200, NOW),
    ]
    first, second = expired_cards(gone, NOW)
    assert isinstance(first, ExpireCard) and isinstance(second, ExpireCard)
    assert (first.chat_id, first.turn_id, first.outcome) == (CHAT, "t9", EXPIRED)
    assert 'write_file(path="x")' in first.notice and "nothing ran" in first.notice
    assert "60 min" in first.notice
    assert (second.turn_id, second.outcome) == ("p1", EXPIRED_PROMOTION)
    assert "tool shout" in second.notice and "not added" in second.notice


def test_a_malformed_tap_is_a_deny() -> None:
    a = arbiter()
    effects = a.on_inbox(view(tap("t9", None), approvals=frozenset({"t9"})))
    assert of(TakeParked, effects) == [TakeParked(tap("t9", False))]


def test_a_tap_on_a_promotion_goes_to_the_gate_without_the_slot() -> None:
    a = arbiter()
    running = busy_with_a_turn(a)
    effects = a.on_inbox(view(tap("p1"), promotions=frozenset({"p1"})))
    assert effects == [TakeRow(1), RoutePromotion(tap("p1"))]
    assert a.busy == running


def test_an_approved_call_resumes_its_turn() -> None:
    a = arbiter()
    a.on_inbox(view(tap("t9"), approvals=frozenset({"t9"})))
    settle, resume = a.on_approval_taken(tap("t9"), PARKED)
    assert settle == SettleTap(tap("t9"), APPROVED)
    assert isinstance(resume, Resume)
    assert (resume.request.turn_id, resume.request.approved) == ("t9", True)
    assert resume.request.parked == PARKED


def test_a_denied_call_resumes_its_turn_told_no() -> None:
    a = arbiter()
    a.on_inbox(view(tap("t9", False), approvals=frozenset({"t9"})))
    settle, resume = a.on_approval_taken(tap("t9", False), PARKED)
    assert settle == SettleTap(tap("t9", False), DENIED)
    assert isinstance(resume, Resume) and resume.request.approved is False


@pytest.mark.parametrize(
    ("status", "outcome"), [("expired", EXPIRED), ("unknown", GONE), ("corrupt", UNREADABLE)]
)
def test_an_approval_gone_by_the_time_it_is_taken_runs_nothing_and_frees_the_slot(
    status: str, outcome: str
) -> None:
    a = arbiter()
    a.on_inbox(view(tap("t9"), approvals=frozenset({"t9"})))
    assert a.on_approval_taken(tap("t9"), None, status) == [SettleTap(tap("t9"), outcome), Pump()]
    assert a.busy is None


def test_a_stale_approval_taken_while_another_turn_runs_does_not_run_beside_it() -> None:
    a = arbiter()
    running = busy_with_a_turn(a)
    effects = a.on_approval_taken(tap("t9"), PARKED)
    assert of(Resume, effects) == []
    assert SettleTap(tap("t9"), LOST) in effects
    assert a.busy == running


# ---------------------------------------------------------------- a turn ends


def test_a_finished_turn_replies_applies_its_ops_strikes_and_frees_the_slot() -> None:
    a = arbiter()
    turn_id = busy_with_a_turn(a)
    failures = (ToolFailure("weather", "boom", "c1"),)
    ops = (Remember("likes tea"), ProposeTool("shout", "code", "test"))
    result = Result(turn_id=turn_id, reply="Done.", ops=ops, tool_failures=failures)
    assert a.on_turn_ended(CHAT, result) == [
        FinishInbox(turn_id),
        Say(CHAT, "Done.\n\n📝 I'll remember: likes tea", markdown_chars=len("Done.")),
        RecordReply(CHAT, "Done."),
        ApplyOp(turn_id, CHAT, ops[0]),
        ApplyOp(turn_id, CHAT, ops[1]),
        Strike(CHAT, failures),
        Pump(idle_chat=CHAT),
    ]
    assert a.busy is None


def test_a_parked_turn_is_not_idle_yet() -> None:
    a = arbiter()
    turn_id = busy_with_a_turn(a)
    effects = a.on_turn_ended(CHAT, Result(turn_id=turn_id, reply="approve?", ops=(PARKED,)))
    assert effects[-1] == Pump(idle_chat=None)


def test_a_parked_turn_says_its_lead_once_and_leaves_the_question_to_the_card() -> None:
    a = arbiter()
    turn_id = busy_with_a_turn(a)
    effects = a.on_turn_ended(CHAT, Result(turn_id=turn_id, reply="Saving it.", ops=(PARKED,)))
    assert of(Say, effects) == [Say(CHAT, "Saving it.", markdown_chars=10)]  # the model's Markdown
    question = 'I\'d like to run write_file(path="x", content="hi") — approve?'
    assert of(RecordReply, effects) == [RecordReply(CHAT, f"Saving it.\n\n{question}")]
    # With nothing to lead with, the owner gets only the card.
    turn_id = busy_with_a_turn(a)
    effects = a.on_turn_ended(CHAT, Result(turn_id=turn_id, reply="", ops=(PARKED,)))
    assert of(Say, effects) == [] and of(RecordReply, effects) == [RecordReply(CHAT, question)]


@pytest.mark.parametrize(
    "call",
    [
        ToolCall("c1", "my_self_coded_tool", {"x": 1}),  # FREE, never asks: a forged park
        ToolCall("c1", "propose_tool", {}),
        ToolCall("c1", "run_shell", {}, args_error="Expecting value"),
    ],
)
def test_only_a_risky_builtins_call_is_ever_parked(call: ToolCall) -> None:
    # Issue 17: a self-coded tool made the worker park a call to itself with a made-up
    # summary; after Approve it ran with the network on.
    a = arbiter()
    turn_id = busy_with_a_turn(a)
    forged = RequestToolApproval(call, "harmless-looking summary", ())
    effects = a.on_turn_ended(CHAT, Result(turn_id=turn_id, reply="approve?", ops=(forged,)))
    assert of(ApplyOp, effects) == []
    (told,) = [e for e in of(Say, effects) if "refused" in e.text]
    assert call.name in told.text and "harmless-looking" not in told.text
    assert effects[-1] == Pump(idle_chat=CHAT)  # nothing waits for a tap


def test_the_owner_is_told_idle_only_when_no_turn_runs_after_the_inbox_is_read() -> None:
    a = arbiter()
    assert a.on_inbox(view(), idle_chat=CHAT) == [NowIdle(CHAT)]
    effects = a.on_inbox(view(chat("next")), idle_chat=CHAT)
    assert of(NowIdle, effects) == [] and of(BeginTurn, effects)


def test_a_stray_turn_end_changes_nothing() -> None:
    a = arbiter()
    running = busy_with_a_turn(a)
    assert a.on_turn_ended(CHAT, Result(turn_id="t-other", reply="forged")) == []
    assert a.busy == running


def test_a_turn_lost_with_the_turn_actor_ends_with_an_apology() -> None:
    a = arbiter()
    turn_id = busy_with_a_turn(a)
    effects = a.on_turn_lost()
    (say,) = of(Say, effects)
    assert isinstance(say, Say) and say.text.startswith("Sorry")
    assert effects[0] == FinishInbox(turn_id)
    assert a.busy is None
    assert a.on_turn_lost() == []


# ---------------------------------------------------------------- the schedule


def due(i: int, prompt: str = "water the plants") -> Scheduled:
    return Scheduled(i, CHAT, NOW - 1, prompt)


def test_a_due_scheduled_turn_starts_when_free_and_is_budgeted() -> None:
    a = arbiter()
    effects = a.on_inbox(view(due=(due(1), due(2))))
    start, begin = effects
    assert start == StartDue(1, "2023-11-14")
    assert isinstance(begin, BeginTurn) and begin.source == "schedule"
    assert begin.turn_id.startswith("s") and a.busy == begin.turn_id


def test_chat_goes_before_the_schedule() -> None:
    a = arbiter()
    effects = a.on_inbox(view(chat("hi"), due=(due(1),)))
    assert of(StartDue, effects) == []
    (begin,) = of(BeginTurn, effects)
    assert isinstance(begin, BeginTurn) and begin.source == "owner"


def test_scheduled_turns_past_the_budget_are_refused_and_the_owner_told_once_a_day() -> None:
    a = arbiter(daily_turn_budget=2)
    effects = a.on_inbox(view(due=(due(1, "ping 1"), due(2, "ping 2")), spent_today=2))
    assert of(BeginTurn, effects) == [] and of(StartDue, effects) == []
    assert of(RefuseDue, effects) == [RefuseDue(1, "ping 1"), RefuseDue(2, "ping 2")]
    assert of(Say, effects) == [Say(CHAT, BUDGET_SPENT)]
    later = a.on_inbox(view(due=(due(3),), spent_today=2, now=NOW + 60))
    assert of(Say, later) == []
    next_day = a.on_inbox(view(due=(due(4),), spent_today=2, now=NOW + 86_400))
    assert of(Say, next_day) == [Say(CHAT, BUDGET_SPENT)]


# ---------------------------------------------------------------- start and the clock


def test_a_fresh_console_session_forgets_what_the_last_one_left_unanswered() -> None:
    a = Arbiter(LimitsSettings(), owners_of([], console=True))
    left = [(4, encode(InboundMessage(CONSOLE_CHAT, 0, "half-typed thought")))]
    effects = a.on_start(fresh=True, console=True, unanswered=left, unfinished=[], now=NOW)
    abandon, say, reoffer = effects
    assert abandon == Abandon((4,)) and reoffer == Reoffer()
    assert isinstance(say, Say) and "half-typed thought" in say.text


def test_a_fresh_telegram_start_answers_again_what_a_crash_cut_short() -> None:
    a = arbiter()
    left = [(4, encode(chat("still there?")))]
    assert a.on_start(fresh=True, console=False, unanswered=left, unfinished=[], now=NOW) == [
        Reoffer()
    ]


def test_after_its_own_restart_the_arbiter_waits_for_the_turn_in_flight() -> None:
    a = arbiter()
    unfinished = [(4, "t-running", encode(chat("slow one")))]
    assert (
        a.on_start(fresh=False, console=False, unanswered=[], unfinished=unfinished, now=NOW) == []
    )
    assert (a.busy, a.busy_chat) == ("t-running", CHAT)
    assert a.on_inbox(view(chat("next"))) == []
    assert a.on_turn_ended(CHAT, Result(turn_id="t-running", reply="done"))[0] == FinishInbox(
        "t-running"
    )


def test_an_adopted_turn_that_never_ends_is_given_up_with_an_apology() -> None:
    a = arbiter()
    unfinished = [(4, "t-gone", encode(chat("slow one")))]
    a.on_start(fresh=False, console=False, unanswered=[], unfinished=unfinished, now=NOW)
    assert of(FinishInbox, a.on_tick(NOW + 10)) == []
    effects = a.on_tick(NOW + 60)
    assert effects[0] == FinishInbox("t-gone")
    assert effects[-3:] == [ExpireParked(NOW + 60), Pump(), ArmTick()]
    assert a.busy is None


def test_an_adopted_turn_with_a_corrupt_row_is_still_waited_for() -> None:
    a = arbiter()
    a.on_start(fresh=False, console=False, unanswered=[], unfinished=[(4, "t1", b"junk")], now=NOW)
    assert (a.busy, a.busy_chat) == ("t1", 0)


def test_a_tick_expires_parked_rows_reads_the_inbox_and_rearms() -> None:
    assert arbiter().on_tick(NOW) == [ExpireParked(NOW), Pump(), ArmTick()]


@pytest.mark.parametrize(
    ("next_due", "delay"), [(None, TICK_S), (NOW + 5, 5.0), (NOW - 5, 0.05), (NOW + 999, TICK_S)]
)
def test_the_clock_is_read_again_by_the_next_due_turn_at_the_latest(
    next_due: float | None, delay: float
) -> None:
    assert tick_delay(next_due, NOW) == pytest.approx(delay)


def test_the_inbox_view_splits_parked_rows_by_kind() -> None:
    v = inbox_view([], [("approval", "t1"), ("promotion", "p1")], [], 3, NOW)
    assert (v.approvals, v.promotions, v.spent_today) == ({"t1"}, {"p1"}, 3)
