"""A provider call that raised reaches the worker as one ``JobFailed``: a ``ProviderError``
keeps what the worker acts on (kind, retry_after); a bug of ours never leaks its text."""

from __future__ import annotations

from shelldon.broker import job_failed
from shelldon.broker.provider import ProviderError
from shelldon.contracts import JobFailed


def test_a_provider_error_keeps_its_kind_and_retry_after() -> None:
    error = ProviderError("rate_limited", "slow down", 7.0)
    assert job_failed("t1", error) == JobFailed("t1", "rate_limited", "slow down", 7.0)


def test_anything_else_is_a_server_failure_that_names_only_its_class() -> None:
    failed = job_failed("t1", KeyError("sk-secret-in-a-bug"))
    assert failed == JobFailed("t1", "server", "internal error: KeyError")
