"""The ceilings the actor side holds over a worker, decided without any actor or fork."""

from __future__ import annotations

from shelldon.contracts import (
    Completion,
    Job,
    Message,
    Remember,
    Result,
    Role,
    ToolCall,
    ToolFailure,
    ToolStarted,
)
from shelldon.rules.turnwatch import (
    Finished,
    Forward,
    Noted,
    TurnWatch,
    Violation,
    apology,
    max_model_calls,
)


def job(turn_id: str = "t1", deadline: float = 1e9) -> Job:
    return Job(turn_id, (Message(Role.USER, "hi"),), (), deadline)


def watch(**kw: float) -> TurnWatch:
    return TurnWatch("t1", deadline=kw.get("deadline", 100.0), max_model_calls=3, grace_s=2.0)


def test_jobs_are_forwarded_with_the_deadline_clamped_to_the_turns() -> None:
    verdict = watch().on_frame(job(deadline=1e9))
    assert isinstance(verdict, Forward) and verdict.job.deadline == 100.0


def test_the_model_call_past_the_ceiling_is_refused() -> None:
    w = watch()
    assert all(isinstance(w.on_frame(job()), Forward) for _ in range(3))
    verdict = w.on_frame(job())
    assert isinstance(verdict, Violation) and verdict.kind == "ceiling"
    assert "ceiling" in verdict.reason


def test_six_tool_rounds_and_an_answer_fit_the_ceiling() -> None:
    assert max_model_calls(6) == 7


def test_a_job_for_another_turn_is_a_violation() -> None:
    assert watch().on_frame(job("t-other")) == Violation(
        "protocol", "job for another turn ('t-other')"
    )


def test_result_finishes_and_anything_after_it_is_a_violation() -> None:
    w = watch()
    assert isinstance(w.on_frame(Result("t1", "done")), Finished)
    assert isinstance(w.on_frame(job()), Violation)


def test_an_unexpected_frame_is_a_violation() -> None:
    assert isinstance(watch().on_frame(Remember("x")), Violation)


def test_overdue_only_after_deadline_plus_grace() -> None:
    w = watch(deadline=100.0)
    assert not w.overdue(101.9)
    assert w.overdue(102.1)


def watch_tools(*self_coded: str) -> TurnWatch:
    return TurnWatch("t1", 100.0, 7, 2.0, frozenset(self_coded))


def asked_for(w: TurnWatch, *names: str, first: int = 0) -> tuple[ToolCall, ...]:
    """The model's answer relayed to the worker asked for these tools (ids c<first>, ...)."""
    calls = tuple(ToolCall(f"c{first + i}", n, {}) for i, n in enumerate(names))
    w.on_answer(Completion(tool_calls=calls))
    return calls


def answered(w: TurnWatch, *results: tuple[str, bool]) -> None:
    """The worker's next Job, carrying the round's results as it told the model."""
    said = tuple(
        Message(Role.TOOL, "out" if ok else "failed", tool_call_id=call, is_error=not ok)
        for call, ok in results
    )
    assert isinstance(w.on_frame(Job("t1", (Message(Role.USER, "hi"), *said), (), 1e9)), Forward)


def test_a_tool_running_when_the_worker_is_killed_earns_a_strike() -> None:
    w = watch_tools("nap")
    asked_for(w, "get_time", "nap")
    assert isinstance(w.on_frame(ToolStarted("t1", "nap", "c1")), Noted)
    result = apology("t1", "timeout", w)
    assert [(f.name, f.call_id) for f in result.tool_failures] == [("nap", "c1")]
    assert "nap" in result.reply


def test_a_tool_the_model_did_not_call_is_never_blamed() -> None:
    # Issue 17: a hanging tool announced another one; three hangs quarantined the innocent.
    w = watch_tools("hang", "innocent")
    asked_for(w, "hang")
    verdict = w.on_frame(ToolStarted("t1", "innocent", "c0"))
    assert isinstance(verdict, Violation) and verdict.kind == "protocol"
    assert apology("t1", "protocol", w).tool_failures == ()
    # Nor a tool of an earlier answer, nor one before any answer, nor one announced twice.
    w2 = watch_tools("hang")
    assert isinstance(w2.on_frame(ToolStarted("t1", "hang", "c0")), Violation)
    w3 = watch_tools("hang")
    asked_for(w3, "hang")
    w3.on_answer(Completion(text="done"))
    assert isinstance(w3.on_frame(ToolStarted("t1", "hang", "c0")), Violation)
    w4 = watch_tools("hang")
    asked_for(w4, "hang")
    assert isinstance(w4.on_frame(ToolStarted("t1", "hang", "c0")), Noted)
    assert isinstance(w4.on_frame(ToolStarted("t1", "hang", "c0")), Violation)


def test_a_tool_that_finished_is_not_blamed() -> None:
    w = watch_tools("nap")
    asked_for(w, "nap")
    w.on_frame(ToolStarted("t1", "nap", "c0"))
    answered(w, ("c0", True))  # the worker asked the model again: the tool returned
    assert w.blamed() == ""
    assert apology("t1", "timeout", w).tool_failures == ()


def test_a_hang_announced_after_another_call_of_the_same_answer_strikes_no_one() -> None:
    # Issue 30, forgery 2: "hang" really hangs; the worker then announces "innocent", which
    # the model called in the same answer. Which one ran cannot be told from here.
    w = watch_tools("hang", "innocent")
    asked_for(w, "hang", "innocent")
    assert isinstance(w.on_frame(ToolStarted("t1", "hang", "c0")), Noted)
    assert isinstance(w.on_frame(ToolStarted("t1", "innocent", "c1")), Noted)
    result = apology("t1", "timeout", w)
    assert result.tool_failures == () and "innocent" not in result.reply
    # Announcing only the innocent one does not help either: two self-coded calls were due.
    w2 = watch_tools("hang", "innocent")
    asked_for(w2, "hang", "innocent")
    w2.on_frame(ToolStarted("t1", "innocent", "c1"))
    assert apology("t1", "timeout", w2).tool_failures == ()


def test_failures_for_calls_never_relayed_are_dropped() -> None:
    # Issue 30, forgery 1: a Result that blames tools the model never called this turn.
    w = watch_tools("adder", "innocent")
    asked_for(w, "adder")
    answered(w, ("c0", False))
    forged = (
        ToolFailure("adder", "boom", "c0"),  # the real one
        ToolFailure("innocent", "boom", "c0"),  # a real call id, another tool
        ToolFailure("innocent", "boom", "c9"),  # an id never relayed
        ToolFailure("innocent", "boom", ""),  # no call at all
        ToolFailure("adder", "boom", "c0"),  # the real one, again
        ToolFailure("read_file", "boom", "c0"),  # not a self-coded tool
    )
    verdict = w.on_frame(Result("t1", "done", tool_failures=forged))
    assert isinstance(verdict, Finished)
    assert verdict.result.tool_failures == (ToolFailure("adder", "boom", "c0"),)
    assert len(verdict.dropped) == 5


def test_a_failure_for_a_call_the_worker_told_the_model_succeeded_is_dropped() -> None:
    w = watch_tools("adder")
    asked_for(w, "adder")
    answered(w, ("c0", True))
    verdict = w.on_frame(Result("t1", "done", tool_failures=(ToolFailure("adder", "x", "c0"),)))
    assert isinstance(verdict, Finished) and verdict.result.tool_failures == ()


def test_a_tool_called_in_several_rounds_can_fail_in_each() -> None:
    w = watch_tools("adder")
    asked_for(w, "adder")
    answered(w, ("c0", False))
    asked_for(w, "adder", first=1)
    answered(w, ("c1", False))
    failures = (ToolFailure("adder", "x", "c0"), ToolFailure("adder", "y", "c1"))
    verdict = w.on_frame(Result("t1", "done", tool_failures=failures))
    assert isinstance(verdict, Finished) and verdict.result.tool_failures == failures
