"""Fixtures: the production actor system (every actor in this process), driven by the loop in
the test's own thread, always stopped."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from actors.inproc import Driver
from actors.system import start_actor_system, stop_actor_system


class Looped:
    """The system as a test talks to it: create, tell, and ask/listen through the loop (so an
    answer that waits for a descriptor or a wake-up still arrives)."""

    def __init__(self, system: Any, driver: Driver) -> None:
        self.system, self.driver = system, driver

    def createActor(self, cls: type) -> Any:
        return self.system.createActor(cls)

    def tell(self, address: Any, message: Any) -> None:
        self.driver.tell(address, message)

    def ask(self, address: Any, message: Any, timeout: float) -> Any:
        return self.driver.ask(address, message, timeout)

    def listen(self, timeout: float) -> Any:
        """The next answer sent to the test from an earlier ask, or None past ``timeout``."""
        requester = self.system._systemBase.actorRegistry["System:ExternalRequester"].instance
        deadline = time.monotonic() + timeout
        while not getattr(requester, "responses", None) and time.monotonic() < deadline:
            self.driver.step(min(0.05, max(0.0, deadline - time.monotonic())))
        answers = getattr(requester, "responses", None)
        return answers.pop(0) if answers else None


@pytest.fixture
def running() -> Iterator[Looped]:
    """The in-process system and its driver, stopped even if the test fails."""
    system = start_actor_system()
    driver = Driver(system)
    try:
        yield Looped(system, driver)
    finally:
        driver.close()
        stop_actor_system(system)
