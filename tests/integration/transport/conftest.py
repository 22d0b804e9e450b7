"""Every transport integration test doubles as a check that no log line names a bot token."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import structlog

from tests.fakes.fake_telegram import TEST_TOKEN


@pytest.fixture(autouse=True)
def no_token_in_logs() -> Iterator[None]:
    """Capture the test's log lines (those it does not capture itself) and check them."""
    with structlog.testing.capture_logs() as logs:
        yield
    assert TEST_TOKEN not in json.dumps(logs, default=repr)
    assert TEST_TOKEN.split(":")[1] not in json.dumps(logs, default=repr)
