"""Network faults: the Bot API drops long polls, answers 502 and sends 429 bursts; the model's
API (OpenAI-compatible, on a fake) answers 429 with retry-after, 529, 500 and stalls past the
turn budget. Every owner message gets exactly one final answer (or an honest apology), in
order, and the service keeps serving."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes.fake_openai import FakeOpenAI
from tests.integration.runtime.harness import Service

from .rig import OWNER, texts, wait_until

pytestmark = pytest.mark.slow

ANSWERS = [f"answer {i}" for i in range(4)]
SCRIPT = [{"when": f"msg{i}", "text": ANSWERS[i]} for i in range(4)]


def finals(svc: Service, wanted: list[str]) -> list[str]:
    """The owner's chat, keeping only final answers: the wanted ones and apologies."""
    assert svc.telegram is not None
    return [t for t in texts(svc.telegram) if t in wanted or t.startswith("Sorry")]


def send_all(svc: Service, count: int) -> None:
    tg = svc.telegram
    assert tg is not None
    for i in range(count):
        tg.do(tg.fake.queue_message, OWNER, f"msg{i}")
        time.sleep(0.05)  # distinct arrival order, as a person types


@pytest.fixture
def telegram_service(tmp_path: Path) -> Iterator[Service]:
    svc = Service(
        tmp_path / "home", SCRIPT, telegram=True, SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER)
    )
    try:
        assert svc.telegram is not None
        svc.telegram.wait(lambda: svc.telegram is not None and svc.telegram.fake.commands)
        yield svc
    finally:
        svc.stop()


def test_dropped_polls_and_502s_lose_no_message(telegram_service: Service) -> None:
    tg = telegram_service.telegram
    assert tg is not None
    tg.do(setattr, tg.fake, "drop_polls", 2)
    tg.do(tg.fake.fail_next, "getUpdates", 502, times=2)
    tg.do(tg.fake.fail_next, "sendMessage", 502, times=2)
    send_all(telegram_service, 4)
    wait_until(lambda: len(finals(telegram_service, ANSWERS)) >= 4, 30, "four answers")
    time.sleep(0.5)
    assert finals(telegram_service, ANSWERS) == ANSWERS


def test_429_bursts_are_waited_out_and_every_answer_arrives_once(
    telegram_service: Service,
) -> None:
    tg = telegram_service.telegram
    assert tg is not None
    tg.do(tg.fake.fail_next, "getUpdates", 429, retry_after=1, times=2)
    tg.do(tg.fake.fail_next, "sendMessage", 429, retry_after=0.5, times=3)
    before = time.monotonic()
    send_all(telegram_service, 4)
    wait_until(lambda: len(finals(telegram_service, ANSWERS)) >= 4, 30, "four answers")
    time.sleep(0.5)
    assert finals(telegram_service, ANSWERS) == ANSWERS
    # Flood control was honoured, not hammered through.
    assert time.monotonic() - before >= 1.0


@pytest.fixture
def llm() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


def openai_service(home: Path, llm: FakeOpenAI, **env: str) -> Service:
    (home / "vault").mkdir(parents=True, exist_ok=True)
    assert llm.api_key is not None
    (home / "vault" / "openai_api_key").write_text(llm.api_key + "\n")
    return Service(
        home,
        [],
        telegram=True,
        SHELLDON_TELEGRAM_ALLOWED_USERS=str(OWNER),
        SHELLDON_BRAIN_PROVIDER="openai",
        SHELLDON_BRAIN_MODEL="gpt-fake",
        SHELLDON_BRAIN_BASE_URL=llm.base_url,
        **env,
    )


def test_provider_429_529_500_are_retried_within_the_turn(tmp_path: Path, llm: FakeOpenAI) -> None:
    llm.reply_error(
        429, "Rate limit reached", code="rate_limit_exceeded", headers={"retry-after": "1"}
    )
    llm.reply_text(ANSWERS[0])
    llm.reply_error(529, "Overloaded")
    llm.reply_text(ANSWERS[1])
    llm.reply_error(500, "The server had an error")
    llm.reply_error(500, "The server had an error")
    llm.reply_text(ANSWERS[2])
    svc = openai_service(tmp_path / "home", llm)
    try:
        send_all(svc, 3)
        wait_until(lambda: len(finals(svc, ANSWERS)) >= 3, 30, "three answers")
        time.sleep(0.5)
        assert finals(svc, ANSWERS) == ANSWERS[:3]
        assert llm.pending == 0
    finally:
        svc.stop()


def test_a_stalled_provider_gets_an_apology_within_the_budget_and_the_next_turn_runs(
    tmp_path: Path, llm: FakeOpenAI
) -> None:
    llm.reply_text("too late", delay_s=8)
    llm.reply_text(ANSWERS[1])
    svc = openai_service(
        tmp_path / "home",
        llm,
        SHELLDON_LIMITS_TURN_TIMEOUT_S="2",
        SHELLDON_LIMITS_BAIL_MARGIN_S="0.5",
        SHELLDON_LIMITS_KILL_GRACE_S="0.5",
    )
    try:
        assert svc.telegram is not None
        tg = svc.telegram
        tg.wait(lambda: tg.fake.commands)
        before = time.monotonic()
        tg.do(tg.fake.queue_message, OWNER, "msg0")
        wait_until(lambda: finals(svc, ANSWERS), 10, "an answer for the stalled turn")
        assert time.monotonic() - before < 2 + 0.5 + 1.5
        (apology,) = finals(svc, ANSWERS)
        assert apology.startswith("Sorry") and "too late" not in texts(tg)
        tg.do(tg.fake.queue_message, OWNER, "msg1")
        wait_until(lambda: ANSWERS[1] in texts(tg), 15, "the next turn's answer")
        assert finals(svc, ANSWERS)[-1] == ANSWERS[1]
    finally:
        svc.stop()
