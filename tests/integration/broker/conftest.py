"""Fake provider servers on 127.0.0.1 and the providers that talk to them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shelldon.broker.provider import Backoff
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.fakes.fake_openai import FakeOpenAI

FAST_BACKOFF = Backoff(base_s=0.01, cap_s=0.05, max_attempts=4)
"""Retry pacing for tests: real backoff shape, milliseconds instead of seconds."""


@pytest.fixture
def fake_anthropic() -> Iterator[FakeAnthropic]:
    """A running fake Anthropic Messages API."""
    with FakeAnthropic() as fake:
        yield fake


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A running fake OpenAI Chat Completions API that wants a key."""
    with FakeOpenAI() as fake:
        yield fake
