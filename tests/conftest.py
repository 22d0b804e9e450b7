"""Shared fixtures: a fresh shelldon home per test, settings loaded from it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from shelldon.config import Settings, load_settings
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An empty shelldon home with its workspace and vault directories."""
    h = tmp_path / "home"
    (h / "workspace").mkdir(parents=True)
    (h / "vault").mkdir()
    return h


@pytest.fixture
def settings(home: Path) -> Settings:
    """Default settings rooted at the test's home (no config file, no environment)."""
    return load_settings(environ={"SHELLDON_HOME": str(home)})


@pytest.fixture
def store(settings: Settings) -> Iterator[Store]:
    """The home's store, closed after the test."""
    with Store(settings.database) as opened:
        yield opened


@pytest.fixture
def sc(settings: Settings, store: Store) -> Toolbox:
    """The home's toolbox (``<home>/toolbox``), its approvals in ``store``."""
    return Toolbox.from_settings(settings, store)


# Loaded CI machines make wall-clock deadlines flaky; hypothesis still bounds examples.
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("shelldon", deadline=None)
_hypothesis_settings.load_profile("shelldon")
