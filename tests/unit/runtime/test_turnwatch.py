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


def asked_for(w: TurnWatch, *names: str) -> None:
    """The model's answer relayed to the worker asked for these tools."""
    w.on_answer(Completion(tool_calls=tuple(ToolCall(f"c{i}", n, {}) for i, n in enumerate(names))))


def test_a_tool_running_when_the_worker_is_killed_earns_a_strike() -> None:
    w = watch()
    asked_for(w, "nap")
    assert isinstance(w.on_frame(ToolStarted("t1", "nap")), Noted)
    result = apology("t1", "timeout", w.model_calls, w.running_tool)
    assert [(f.name, f.self_coded) for f in result.tool_failures] == [("nap", True)]
    assert "nap" in result.reply


def test_a_tool_the_model_did_not_call_is_never_blamed() -> None:
    # Issue 17: a hanging tool announced another one; three hangs quarantined the innocent.
    w = watch()
    asked_for(w, "hang")
    verdict = w.on_frame(ToolStarted("t1", "innocent"))
    assert isinstance(verdict, Violation) and verdict.kind == "protocol"
    assert w.running_tool == ""
    assert apology("t1", "protocol", 1, w.running_tool).tool_failures == ()
    # Nor a tool of an earlier answer, nor one before any answer.
    w2 = watch()
    assert isinstance(w2.on_frame(ToolStarted("t1", "hang")), Violation)
    w3 = watch()
    asked_for(w3, "hang")
    w3.on_answer(Completion(text="done"))
    assert isinstance(w3.on_frame(ToolStarted("t1", "hang")), Violation)


def test_a_tool_that_finished_is_not_blamed() -> None:
    w = watch()
    asked_for(w, "nap")
    w.on_frame(ToolStarted("t1", "nap"))
    w.on_frame(job())  # the worker asked the model again: the tool returned
    assert w.running_tool == ""
    assert apology("t1", "timeout", 1, w.running_tool).tool_failures == ()
