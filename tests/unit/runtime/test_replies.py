"""The owner's fixed replies: one table of apologies, one for every way a turn can go wrong."""

from __future__ import annotations

import pytest

from shelldon.broker.provider import KINDS
from shelldon.contracts import JobFailed
from shelldon.replies import APOLOGIES, MODEL, STOPPED, model_apology, stopped_apology
from shelldon.rules.replies import approval_question

# Kinds the worker's side adds to the provider's: its channel, and a broker without a brain.
WORKER_KINDS = {"channel", "no_key", "unconfigured"}


@pytest.mark.parametrize("kind", sorted(KINDS | WORKER_KINDS))
def test_every_way_a_model_call_fails_has_its_own_apology(kind: str) -> None:
    assert (MODEL, kind) in APOLOGIES
    assert model_apology(JobFailed("t1", kind, "detail for the log")) == APOLOGIES[(MODEL, kind)]


@pytest.mark.parametrize("kind", ["timeout", "ceiling", "crash", "protocol"])
def test_every_way_a_worker_is_stopped_has_its_own_apology(kind: str) -> None:
    assert stopped_apology(kind).startswith("Sorry — ")


def test_every_apology_is_sorry_and_says_no_internals() -> None:
    for (cause, _kind), text in APOLOGIES.items():
        assert cause in (MODEL, STOPPED)
        assert text.startswith("Sorry — ") and text.endswith((".", "?"))
    assert len(set(APOLOGIES.values())) == len(APOLOGIES)


def test_a_rate_limit_names_the_wait_and_an_unnamed_kind_is_reported_as_it_is() -> None:
    assert "try again in 30 s" in model_apology(JobFailed("t1", "rate_limited", "", 29.6))
    assert "(brand_new)" in model_apology(JobFailed("t1", "brand_new", "?"))
    assert "429" not in model_apology(JobFailed("t1", "rate_limited", "429 Too Many Requests"))


def test_the_approval_question_names_exactly_what_would_run() -> None:
    assert approval_question('run_shell(command="ls")') == (
        'I\'d like to run run_shell(command="ls") — approve?'
    )
