"""The bounded loop, driven by a scripted brain: no fork, no socket, no sleep."""

from __future__ import annotations

import dataclasses

import pytest

from shelldon.config import Settings
from shelldon.contracts import (
    Completion,
    JobFailed,
    ProposeTool,
    Remember,
    RequestToolApproval,
    Result,
    ResumeRequest,
    Role,
    ToolCall,
    TurnRequest,
    Usage,
)
from shelldon.replies import describe_call as summarize_call
from shelldon.worker.loop import (
    DENIED_BY_OWNER,
    PROPOSAL_RECEIVED,
    PROPOSE_TOOL,
    run_resume,
    run_turn,
)
from tests.unit.worker.brain import Counters, ScriptedBrain, call, calls, make_registry, say

FAR = 1e12  # a deadline nobody reaches


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def turn(
    settings: Settings,
    brain: ScriptedBrain,
    counters: Counters | None = None,
    text: str = "hello",
    deadline: float = FAR,
    **kwargs: object,
) -> Result:
    registry = make_registry(settings, counters or Counters())
    request = TurnRequest("t1", 42, text)
    return run_turn(request, registry, brain, settings, deadline, **kwargs)  # type: ignore[arg-type]


def parked_of(result: Result) -> RequestToolApproval:
    approvals = [op for op in result.ops if isinstance(op, RequestToolApproval)]
    assert len(approvals) == 1, result.ops
    return approvals[0]


def resume(
    settings: Settings,
    brain: ScriptedBrain,
    parked: RequestToolApproval,
    counters: Counters,
    *,
    approved: bool,
) -> Result:
    registry = make_registry(settings, counters)
    request = ResumeRequest("t1", 42, parked, approved)
    return run_resume(request, registry, brain, settings, FAR)


# ------------------------------------------------------------------ the plain loop


def test_text_answer_ends_the_turn_after_one_model_call(settings: Settings) -> None:
    brain = ScriptedBrain([say("Hi there!", tokens=5)])
    result = turn(settings, brain)
    assert result.reply == "Hi there!"
    assert (result.model_calls, result.tool_executions) == (1, 0)
    assert result.usage == Usage(5, 5)
    first = brain.jobs[0]
    assert first.turn_id == "t1"
    assert first.messages[0].role is Role.SYSTEM
    assert first.messages[-1].role is Role.USER and first.messages[-1].content == "hello"


def test_free_tool_runs_inline_and_its_result_goes_back_framed(settings: Settings) -> None:
    counters = Counters()
    brain = ScriptedBrain([calls(call("echo", x=1), text="let me see"), say("It echoed.")])
    result = turn(settings, brain, counters)
    assert result.reply == "It echoed."
    assert counters["echo"] == 1
    assert (result.model_calls, result.tool_executions) == (2, 1)
    second = brain.jobs[1].messages
    assert second[-2].role is Role.ASSISTANT and second[-2].content == "let me see"
    assert second[-2].tool_calls == (call("echo", x=1),)
    answer = second[-1]
    assert answer.role is Role.TOOL and answer.tool_call_id == "id-echo"
    assert answer.content.startswith('<tool_output tool="echo">')
    assert "echo [('x', 1)]" in answer.content
    assert answer.content.endswith("</tool_output>")
    assert answer.is_error is False


def test_every_job_offers_the_registry_tools_and_propose_tool(settings: Settings) -> None:
    brain = ScriptedBrain([calls(call("echo")), say("ok")])
    turn(settings, brain)
    for job in brain.jobs:
        names = [t.name for t in job.tools]
        assert "propose_tool" in names and "echo" in names and "delete" in names
        assert job.deadline == FAR


def test_usage_is_summed_over_every_model_call(settings: Settings) -> None:
    brain = ScriptedBrain(
        [calls(call("echo"), tokens=3), calls(call("count"), tokens=4), say("x", 5)]
    )
    result = turn(settings, brain)
    assert result.usage == Usage(12, 12)
    assert result.model_calls == 3


def test_failing_unknown_and_malformed_calls_are_answered_not_raised(settings: Settings) -> None:
    bad_args = ToolCall("id-bad", "echo", {}, args_error="Expecting value: line 1")
    brain = ScriptedBrain(
        [calls(call("fails"), call("no_such_tool"), bad_args, call("broken_selfcoded")), say("ok")]
    )
    result = turn(settings, brain)
    assert result.reply == "ok"
    answers = [m for m in brain.jobs[1].messages if m.role is Role.TOOL]
    assert [m.is_error for m in answers] == [True, True, True, True]
    assert "the file is not there" in answers[0].content
    assert "unknown tool 'no_such_tool'" in answers[1].content
    assert "not valid JSON" in answers[2].content
    assert "ZeroDivisionError" in answers[3].content
    assert [f.name for f in result.tool_failures] == ["broken_selfcoded"]


def test_ops_in_the_final_text_become_ops_and_leave_the_reply(settings: Settings) -> None:
    text = 'Noted!\n```ops\n{"op": "remember", "fact": "likes tea"}\n```\n'
    result = turn(settings, ScriptedBrain([say(text)]))
    assert result.reply == "Noted!"
    assert result.ops == (Remember("likes tea"),)


def test_reply_made_only_of_ops_still_says_something(settings: Settings) -> None:
    result = turn(settings, ScriptedBrain([say('```ops\n{"op":"remember","fact":"x"}\n```')]))
    assert result.reply == "Done."
    assert result.ops == (Remember("x"),)


def test_empty_answer_gets_a_short_apology(settings: Settings) -> None:
    result = turn(settings, ScriptedBrain([say("")]))
    assert result.reply.startswith("Sorry")


# ------------------------------------------------------------------ ceilings


def test_six_tool_runs_then_tools_are_withdrawn_and_the_model_must_answer(
    settings: Settings,
) -> None:
    counters = Counters()
    brain = ScriptedBrain([calls(call("count", f"c{i}")) for i in range(6)] + [say("done")])
    result = turn(settings, brain, counters)
    assert result.reply == "done"
    assert counters["count"] == 6
    assert (result.model_calls, result.tool_executions) == (7, 6)
    assert all(job.tools for job in brain.jobs[:6])
    assert brain.jobs[6].tools == ()


def test_model_that_keeps_calling_past_the_ceiling_gets_its_best_text(settings: Settings) -> None:
    counters = Counters()
    brain = ScriptedBrain([calls(call("count", f"c{i}"), text="still digging") for i in range(7)])
    result = turn(settings, brain, counters)
    assert counters["count"] == 6
    assert result.model_calls == 7
    assert result.reply.startswith("still digging")
    assert "limit of 6 tool runs" in result.reply


def test_model_past_the_ceiling_without_any_text_gets_an_apology(settings: Settings) -> None:
    brain = ScriptedBrain([calls(call("count", f"c{i}")) for i in range(7)])
    result = turn(settings, brain)
    assert result.reply.startswith("Sorry")
    assert "limit of 6 tool runs" in result.reply


def test_calls_beyond_the_ceiling_in_one_completion_are_answered_not_run(
    settings: Settings,
) -> None:
    counters = Counters()
    many = [call("count", f"c{i}") for i in range(8)]
    brain = ScriptedBrain([calls(*many), say("enough")])
    result = turn(settings, brain, counters)
    assert counters["count"] == 6
    assert result.tool_executions == 6
    answers = [m for m in brain.jobs[1].messages if m.role is Role.TOOL]
    # Every call gets an answer, so no provider rejects the next request.
    assert [a.tool_call_id for a in answers] == [c.id for c in many]
    assert [a.is_error for a in answers] == [False] * 6 + [True] * 2
    assert "limit of 6 tool runs is spent" in answers[-1].content
    assert brain.jobs[1].tools == ()


def test_ceiling_comes_from_settings(settings: Settings) -> None:
    tight = dataclasses.replace(
        settings, limits=dataclasses.replace(settings.limits, max_tool_executions=2)
    )
    counters = Counters()
    brain = ScriptedBrain([calls(call("count", f"c{i}")) for i in range(2)] + [say("ok")])
    result = turn(tight, brain, counters)
    assert counters["count"] == 2 and result.model_calls == 3
    assert brain.jobs[2].tools == ()


def test_turn_bails_with_its_best_text_when_the_deadline_is_near(settings: Settings) -> None:
    clock = FakeClock()
    counters = Counters()

    def slow_brain(job: object) -> Completion:
        clock.now = 23.5  # 1.5 s left of 25: under the 2 s bail margin
        return calls(call("count"), text="I'm looking into it")

    result = run_turn(
        TurnRequest("t1", 42, "hi"),
        make_registry(settings, counters),
        slow_brain,
        settings,
        25.0,
        clock=clock,
    )
    assert result.model_calls == 1
    assert counters["count"] == 0  # the tool was not started with no time left
    assert result.reply.startswith("I'm looking into it")
    assert "ran out of time" in result.reply


def test_turn_with_no_time_left_apologizes_without_asking_the_model(settings: Settings) -> None:
    clock = FakeClock()
    clock.now = 24.0
    brain = ScriptedBrain([say("never")])
    result = turn(settings, brain, deadline=25.0, clock=clock)
    assert brain.jobs == []
    assert result.model_calls == 0
    assert result.reply.startswith("Sorry") and "ran out of time" in result.reply


@pytest.mark.parametrize(
    ("failed", "phrase"),
    [
        (JobFailed("t1", "rate_limited", "429"), "rate-limited, try again in a minute"),
        (JobFailed("t1", "rate_limited", "429", retry_after=30.0), "try again in 30 s"),
        (JobFailed("t1", "overloaded", "529"), "overloaded"),
        (JobFailed("t1", "timeout", "slow"), "took too long"),
        (JobFailed("t1", "auth", "401"), "credentials"),
        (JobFailed("t1", "channel", "EOF"), "lost contact"),
        (JobFailed("t1", "weird_new_kind", "?"), "weird_new_kind"),
    ],
)
def test_failed_model_call_becomes_an_honest_apology(
    settings: Settings, failed: JobFailed, phrase: str
) -> None:
    result = turn(settings, ScriptedBrain([failed]))
    assert result.reply.startswith("Sorry")
    assert phrase in result.reply
    assert "429" not in result.reply and "401" not in result.reply
    assert result.model_calls == 1


def test_failed_model_call_after_tools_keeps_the_counts(settings: Settings) -> None:
    brain = ScriptedBrain([calls(call("echo")), JobFailed("t1", "server", "500")])
    result = turn(settings, brain)
    assert (result.model_calls, result.tool_executions) == (2, 1)
    assert "server" in result.reply


# ------------------------------------------------------------------ op tools


def test_propose_tool_call_becomes_an_op_and_is_acknowledged(settings: Settings) -> None:
    proposal = call("propose_tool", name="shout", code="def run(): ...", test="def test(): ...")
    brain = ScriptedBrain([calls(proposal), say("I wrote a tool.")])
    result = turn(settings, brain)
    assert result.ops == (ProposeTool("shout", "def run(): ...", "def test(): ..."),)
    answer = brain.jobs[1].messages[-1]
    assert PROPOSAL_RECEIVED in answer.content and answer.is_error is False
    assert result.tool_executions == 1


def test_propose_tool_with_missing_fields_is_refused_without_an_op(settings: Settings) -> None:
    brain = ScriptedBrain([calls(call("propose_tool", name="x", code="")), say("oops")])
    result = turn(settings, brain)
    assert result.ops == ()
    answer = brain.jobs[1].messages[-1]
    assert answer.is_error and "code, test" in answer.content


def test_a_proposal_may_name_the_tool_it_replaces_and_nothing_else(settings: Settings) -> None:
    improved = call("propose_tool", name="shout", code="c", test="t", replaces=" shout ")
    bad = call("propose_tool", name="shout", code="c", test="t", replaces=["shout"])
    # A model cannot pick its own repair round: there is no such field to fill in.
    sneaky = call("propose_tool", name="shout", code="c", test="t", round=-5)
    brain = ScriptedBrain([calls(improved, bad, sneaky), say("done")])
    result = turn(settings, brain)
    assert result.ops == (
        ProposeTool("shout", "c", "t", replaces="shout"),
        ProposeTool("shout", "c", "t"),
    )
    answers = [m for m in brain.jobs[1].messages if m.role is Role.TOOL]
    assert answers[1].is_error and "replaces must be a tool's name" in answers[1].content
    assert "replaces" in PROPOSE_TOOL.params_schema["properties"]


def test_propose_tool_definition_is_free_and_requires_all_fields() -> None:
    assert PROPOSE_TOOL.tier.value == "free"
    assert PROPOSE_TOOL.params_schema["required"] == ["name", "code", "test"]


# ------------------------------------------------------------------ park


def test_first_risky_call_parks_the_turn_and_asks_the_owner(settings: Settings) -> None:
    counters = Counters()
    brain = ScriptedBrain([calls(call("delete", path="old.log"), text="Cleaning up.")])
    result = turn(settings, brain, counters)
    assert counters["delete"] == 0
    # The question is the card's (in the parent's words); the reply keeps only the lead, so
    # the owner does not read "I'd like to run" twice.
    assert result.reply == "Cleaning up."
    parked = parked_of(result)
    assert parked.call == call("delete", path="old.log")
    assert parked.summary == 'delete(path="old.log")'
    assert parked.messages[-1].role is Role.ASSISTANT
    assert parked.messages[-1].tool_calls == (parked.call,)
    assert result.model_calls == 1 and result.tool_executions == 0


def test_mixed_completion_runs_the_free_prefix_and_drops_calls_after_the_risky_one(
    settings: Settings,
) -> None:
    counters = Counters()
    mixed = [call("echo", "f1"), call("count", "f2"), call("delete", "r1"), call("count", "f3")]
    result = turn(settings, ScriptedBrain([calls(*mixed)]), counters)
    assert counters["echo"] == 1 and counters["count"] == 1  # f3 never ran
    assert counters["delete"] == 0
    parked = parked_of(result)
    assistant = parked.messages[-3]
    assert [c.id for c in assistant.tool_calls] == ["f1", "f2", "r1"]
    assert [m.tool_call_id for m in parked.messages[-2:]] == ["f1", "f2"]
    assert result.tool_executions == 2


def test_risky_call_with_unparseable_args_is_answered_not_parked(settings: Settings) -> None:
    bad = ToolCall("r1", "delete", {}, args_error="Unterminated string")
    brain = ScriptedBrain([calls(bad), say("never mind")])
    result = turn(settings, brain)
    assert not any(isinstance(op, RequestToolApproval) for op in result.ops)
    assert result.reply == "never mind"


def test_risky_call_after_the_ceiling_is_refused_not_parked(settings: Settings) -> None:
    counters = Counters()
    six = [call("count", f"c{i}") for i in range(6)]
    brain = ScriptedBrain([calls(*six, call("delete", "r1")), say("gave up")])
    result = turn(settings, brain, counters)
    assert not any(isinstance(op, RequestToolApproval) for op in result.ops)
    assert brain.jobs[1].messages[-1].is_error
    assert result.reply == "gave up"


# ------------------------------------------------------------------ resume


def park_mixed(settings: Settings, counters: Counters) -> RequestToolApproval:
    mixed = [call("echo", "f1"), call("count", "f2"), call("delete", "r1", path="a.txt")]
    result = turn(settings, ScriptedBrain([calls(*mixed)]), counters)
    return parked_of(result)


def test_resume_on_approve_runs_the_call_and_continues_to_a_reply(settings: Settings) -> None:
    counters = Counters()
    parked = park_mixed(settings, counters)
    brain = ScriptedBrain([say("Deleted a.txt.")])
    result = resume(settings, brain, parked, counters, approved=True)
    assert counters["delete"] == 1
    assert result.reply == "Deleted a.txt."
    answer = brain.jobs[0].messages[-1]
    assert answer.tool_call_id == "r1" and not answer.is_error
    assert "deleted a.txt" in answer.content
    assert (result.model_calls, result.tool_executions) == (1, 1)


def test_resume_on_deny_answers_denied_by_owner_and_runs_nothing(settings: Settings) -> None:
    counters = Counters()
    parked = park_mixed(settings, counters)
    brain = ScriptedBrain([say("OK, I left it.")])
    result = resume(settings, brain, parked, counters, approved=False)
    assert counters["delete"] == 0
    answer = brain.jobs[0].messages[-1]
    assert answer.tool_call_id == "r1" and answer.is_error
    assert DENIED_BY_OWNER in answer.content
    assert result.reply == "OK, I left it." and result.tool_executions == 0


def test_resume_never_reruns_the_free_calls_from_before_the_pause(settings: Settings) -> None:
    counters = Counters()
    parked = park_mixed(settings, counters)
    assert (counters["echo"], counters["count"]) == (1, 1)
    brain = ScriptedBrain([say("done")])
    resume(settings, brain, parked, counters, approved=True)
    assert (counters["echo"], counters["count"]) == (1, 1)
    # Their results travel in the parked messages, answered exactly once each.
    tool_ids = [m.tool_call_id for m in brain.jobs[0].messages if m.role is Role.TOOL]
    assert tool_ids == ["f1", "f2", "r1"]


def test_resumed_loop_that_meets_another_risky_call_parks_again(settings: Settings) -> None:
    counters = Counters()
    parked = park_mixed(settings, counters)
    brain = ScriptedBrain([calls(call("deploy", "r2", env="prod"), text="Now deploying.")])
    result = resume(settings, brain, parked, counters, approved=True)
    again = parked_of(result)
    assert again.call.id == "r2" and counters["deploy"] == 0
    assert result.reply == "Now deploying."
    final = ScriptedBrain([say("Deployed.")])
    result = resume(settings, final, again, counters, approved=True)
    assert counters["deploy"] == 1 and counters["delete"] == 1
    assert result.reply == "Deployed."


def test_tool_run_ceiling_spans_the_pause(settings: Settings) -> None:
    counters = Counters()
    five = [call("count", f"c{i}") for i in range(5)]
    first = turn(settings, ScriptedBrain([calls(*five, call("delete", "r1"))]), counters)
    brain = ScriptedBrain([say("finished")])
    result = resume(settings, brain, parked_of(first), counters, approved=True)
    assert counters["delete"] == 1
    # Five FREE runs before the pause plus the approved one: the ceiling of six is spent.
    assert brain.jobs[0].tools == ()
    assert result.reply == "finished"


# ------------------------------------------------------------------ summaries


def test_summary_shows_exactly_what_will_run() -> None:
    summary = summarize_call(call("run_shell", cmd="ls -la\nrm x", timeout=5))
    assert summary == 'run_shell(cmd="ls -la\\nrm x", timeout=5)'


def test_summary_elides_long_values_but_keeps_every_key() -> None:
    summary = summarize_call(call("write_file", path="a.txt", content="x" * 5000))
    assert summary.startswith('write_file(path="a.txt", content="xxx')
    assert "…(+" in summary and len(summary) < 400


def test_ops_said_alongside_a_tool_call_are_kept(settings: Settings) -> None:
    early = 'On it.\n```ops\n{"op":"remember","fact":"owner asked about tea"}\n```'
    brain = ScriptedBrain([calls(call("echo"), text=early), say("Tea is ready.")])
    result = turn(settings, brain)
    assert result.ops == (Remember("owner asked about tea"),)
    assert result.reply == "Tea is ready."


def test_answer_cut_off_at_the_token_limit_says_so(settings: Settings) -> None:
    brain = ScriptedBrain([Completion(text="The answer is", truncated=True)])
    result = turn(settings, brain)
    assert result.reply == "The answer is …(my answer was cut off at the length limit)"
