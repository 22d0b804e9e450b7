"""The retry loop: backoff with jitter, retry-after honoured, the deadline never crossed.

A fake clock advances only when the loop sleeps or an attempt "takes" time, so these run in
microseconds and assert exact waits.
"""

from __future__ import annotations

import asyncio

import pytest

from shelldon.broker.provider import (
    KINDS,
    RETRYABLE_KINDS,
    Backoff,
    ProviderError,
    call_with_retries,
    parse_retry_after,
)


class FakeTime:
    """A monotonic clock that only moves when told to; records every sleep."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def run_loop(
    outcomes: list[object],
    *,
    budget_s: float = 20.0,
    backoff: Backoff | None = None,
    rand: float = 1.0,
    attempt_cost_s: float = 0.0,
) -> tuple[object, FakeTime, list[float]]:
    """Drive call_with_retries over scripted outcomes (an exception is raised, else returned)."""
    fake = FakeTime()
    timeouts: list[float] = []
    deadline = fake.now + budget_s

    async def attempt(timeout_s: float) -> object:
        timeouts.append(timeout_s)
        fake.now += attempt_cost_s
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def go() -> object:
        return await call_with_retries(
            attempt,
            deadline=deadline,
            what="test",
            backoff=backoff or Backoff(base_s=0.5, cap_s=8.0, max_attempts=5),
            clock=fake.clock,
            sleep=fake.sleep,
            rand=lambda: rand,
        )

    return asyncio.run(go()), fake, timeouts


def test_success_needs_no_retry() -> None:
    result, fake, timeouts = run_loop(["ok"])
    assert result == "ok"
    assert fake.sleeps == []
    assert timeouts == [20.0]


@pytest.mark.parametrize("kind", sorted(RETRYABLE_KINDS))
def test_retryable_kinds_are_retried(kind: str) -> None:
    result, fake, _ = run_loop([ProviderError(kind, "x"), "ok"])
    assert result == "ok"
    assert len(fake.sleeps) == 1


@pytest.mark.parametrize("kind", sorted(KINDS - RETRYABLE_KINDS))
def test_final_kinds_fail_at_once(kind: str) -> None:
    with pytest.raises(ProviderError) as caught:
        run_loop([ProviderError(kind, "x"), "never reached"])
    assert caught.value.kind == kind


def test_backoff_grows_exponentially_up_to_the_cap() -> None:
    errors: list[object] = [ProviderError("server", "x") for _ in range(4)]
    _, fake, _ = run_loop([*errors, "ok"], backoff=Backoff(0.5, 2.0, 10), budget_s=100)
    assert fake.sleeps == [0.5, 1.0, 2.0, 2.0]


def test_jitter_scales_the_wait_down() -> None:
    _, fake, _ = run_loop([ProviderError("server", "x"), "ok"], rand=0.25)
    assert fake.sleeps == [0.125]


def test_retry_after_is_a_floor_under_the_backoff() -> None:
    _, fake, _ = run_loop([ProviderError("rate_limited", "x", retry_after=3.0), "ok"], rand=0.1)
    assert fake.sleeps == [3.0]


def test_retry_after_beyond_the_budget_fails_fast_without_sleeping() -> None:
    with pytest.raises(ProviderError) as caught:
        run_loop([ProviderError("rate_limited", "slow down", retry_after=60.0)], budget_s=10)
    assert caught.value.kind == "rate_limited"
    assert caught.value.retry_after == 60.0
    assert "wait 60.0s" in caught.value.message and "10.0s" in caught.value.message


def test_each_attempt_gets_what_is_left_of_the_deadline() -> None:
    _, _, timeouts = run_loop(
        [ProviderError("server", "x"), ProviderError("server", "x"), "ok"],
        attempt_cost_s=2.0,
        budget_s=20,
    )
    assert timeouts == [20.0, 20.0 - 2.0 - 0.5, 20.0 - 4.0 - 0.5 - 1.0]


def test_no_sleep_crosses_the_deadline() -> None:
    outcomes: list[object] = [ProviderError("overloaded", "x") for _ in range(50)]
    with pytest.raises(ProviderError) as caught:
        run_loop(outcomes, budget_s=3.0, attempt_cost_s=0.4, backoff=Backoff(0.5, 8.0, 50))
    assert caught.value.kind == "overloaded"
    assert "no time left" in caught.value.message


def test_attempts_are_capped() -> None:
    outcomes: list[object] = [ProviderError("server", "x") for _ in range(10)]
    with pytest.raises(ProviderError) as caught:
        run_loop(outcomes, backoff=Backoff(0.01, 0.01, 3), budget_s=100)
    assert "after 3 attempts" in caught.value.message
    assert len(outcomes) == 7


def test_a_passed_deadline_makes_no_attempt() -> None:
    with pytest.raises(ProviderError) as caught:
        run_loop(["never"], budget_s=0.0)
    assert caught.value.kind == "timeout"


def test_unexpected_exceptions_are_not_swallowed() -> None:
    with pytest.raises(ZeroDivisionError):
        run_loop([ZeroDivisionError("bug")])


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown ProviderError kind"):
        ProviderError("oops", "x")


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "3"}, 3.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "Sun, 29 Nov 2026 10:00:30 GMT"}, 30.0),
        ({"retry-after": "Sun, 29 Nov 2026 09:00:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-4"}, None),
        ({"retry-after": "nan"}, None),
        ({"retry-after-ms": "inf"}, None),
        ({}, None),
    ],
)
def test_retry_after_header_forms(headers: dict[str, str], expected: float | None) -> None:
    now = 1_795_946_400.0  # Sun, 29 Nov 2026 10:00:00 GMT
    assert parse_retry_after(headers, now=now) == expected


def test_error_text_and_repr_carry_kind_and_message() -> None:
    err = ProviderError("auth", "check the key", retry_after=None)
    assert str(err) == "auth: check the key"
    assert repr(err) == "ProviderError(kind='auth', message='check the key')"
    assert not err.retryable
