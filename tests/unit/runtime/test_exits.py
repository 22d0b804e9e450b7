"""The rule for awaited worker exits: close on the exit, kill past the grace, give up after."""

from __future__ import annotations

from shelldon.rules.exits import (
    EXIT_GIVE_UP_S,
    EXIT_GRACE_S,
    EXIT_POLL_S,
    AwaitedExit,
    Verdict,
    next_wake,
)


def test_an_exit_that_arrives_closes_at_once() -> None:
    awaited = AwaitedExit.starting(100.0, killed=False)
    assert awaited.look(100.1, exited=True) is Verdict.CLOSE


def test_a_worker_still_running_past_its_grace_is_killed_once_then_given_up() -> None:
    awaited = AwaitedExit.starting(100.0, killed=False)
    assert awaited.look(100.0 + EXIT_GRACE_S / 2, exited=False) is Verdict.WAIT
    killed_at = 100.0 + EXIT_GRACE_S
    assert awaited.look(killed_at, exited=False) is Verdict.KILL
    assert awaited.killed and awaited.give_up_at == killed_at + EXIT_GIVE_UP_S
    assert awaited.look(killed_at + 1.0, exited=False) is Verdict.WAIT
    assert awaited.look(killed_at + EXIT_GIVE_UP_S, exited=False) is Verdict.GIVE_UP


def test_a_worker_killed_already_is_never_killed_again_and_given_up_from_now() -> None:
    awaited = AwaitedExit.starting(100.0, killed=True)
    assert awaited.give_up_at == 100.0 + EXIT_GIVE_UP_S
    assert awaited.look(100.0 + EXIT_GRACE_S, exited=False) is Verdict.WAIT
    assert awaited.look(100.0 + EXIT_GIVE_UP_S, exited=False) is Verdict.GIVE_UP


def test_the_next_wake_is_the_earliest_due_time_or_a_poll_without_descriptors() -> None:
    assert next_wake([], 100.0, all_watched=True) is None
    fresh = AwaitedExit.starting(100.0, killed=False)
    killed = AwaitedExit.starting(100.0, killed=True)
    assert next_wake([fresh, killed], 100.0, all_watched=True) == EXIT_GRACE_S
    assert next_wake([killed], 100.0, all_watched=True) == EXIT_GIVE_UP_S
    assert next_wake([killed], 200.0, all_watched=True) == 0.0
    assert next_wake([fresh], 100.0, all_watched=False) == EXIT_POLL_S
