"""Fixtures for the tool tests: the ToolContext a turn would build from the test's settings."""

from __future__ import annotations

import pytest

from shelldon.config import Settings
from shelldon.worker.tools import ToolContext, context_from_settings


@pytest.fixture
def ctx(settings: Settings) -> ToolContext:
    """The default ToolContext rooted at the test's home (workspace and vault exist)."""
    return context_from_settings(settings)
