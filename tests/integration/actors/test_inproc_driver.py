"""The in-process base's event loop (``actors.inproc.Driver``) on a real simpleSystemBase system:
watched descriptors become ``WatchMessage``s, wake-ups fire on time without a tick, other
threads reach the actors only through the loop, and a handler that raises keeps its actor."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from thespian.actors import ActorAddress, WakeupMessage, WatchMessage

from actors.base import ContractActor
from actors.inproc import Driver
from actors.system import start_actor_system, stop_actor_system
from tests.integration.actors.messages import Calls, CountCalls, Explode, Watched, WatchPipe
from tests.integration.actors.probes import ProbeActor


@dataclass(frozen=True, slots=True)
class Arm:
    seconds: float


@dataclass(frozen=True, slots=True)
class Fired:
    late_s: float
    thread: int


@dataclass(frozen=True, slots=True)
class Swap:
    """Watch a pipe, close it, and watch a new one (likely on the same number) in one go."""

    data: bytes


@dataclass(frozen=True, slots=True)
class ArmMany:
    seconds: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class FiredOrder:
    order: tuple[int, ...]
    worst_late_s: float


class OrderActor(ContractActor):
    """Arms many wake-ups at once and reports the order they fired in."""

    def __init__(self) -> None:
        super().__init__()
        self.asker: ActorAddress | None = None
        self.due: dict[int, float] = {}
        self.fired: list[int] = []
        self.late = 0.0

    def receiveMsg_ArmMany(self, msg: ArmMany, sender: ActorAddress) -> None:
        self.asker, now = sender, time.monotonic()
        for index, seconds in enumerate(msg.seconds):
            self.due[index] = now + seconds
            self.wakeupAfter(timedelta(seconds=seconds), payload=index)

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        self.fired.append(msg.payload)
        self.late = max(self.late, time.monotonic() - self.due[msg.payload])
        if len(self.fired) == len(self.due) - 1:  # the last one is an hour away
            assert self.asker is not None
            self.send(self.asker, FiredOrder(tuple(self.fired), self.late))


class TimerActor(ContractActor):
    def __init__(self) -> None:
        super().__init__()
        self.asker: ActorAddress | None = None
        self.due = 0.0
        self.pipe: tuple[int, ActorAddress] | None = None

    def receiveMsg_Arm(self, msg: Arm, sender: ActorAddress) -> None:
        self.asker, self.due = sender, time.monotonic() + msg.seconds
        self.wakeupAfter(timedelta(seconds=msg.seconds))

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        assert self.asker is not None
        late = time.monotonic() - self.due
        self.send(self.asker, Fired(late, threading.get_ident()))

    def receiveMsg_Swap(self, msg: Swap, sender: ActorAddress) -> None:
        first_r, first_w = os.pipe()
        self.watch(first_r)
        os.close(first_r)
        os.close(first_w)
        self.unwatch(first_r)
        second_r, second_w = os.pipe()
        os.write(second_w, msg.data)
        os.close(second_w)
        self.watch(second_r)
        self.pipe = (second_r, sender)

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        if self.pipe is None or self.pipe[0] not in msg.ready:
            return
        fd, asker = self.pipe
        data = os.read(fd, 4096)
        self.unwatch(fd)
        os.close(fd)
        self.pipe = None
        self.send(asker, Watched(data))


@pytest.fixture
def looped() -> Iterator[tuple[Any, Driver]]:
    system = start_actor_system()
    driver = Driver(system)
    driver.start_thread("test-loop")
    try:
        yield system, driver
    finally:
        driver.close()
        stop_actor_system(system)


def test_a_watched_pipe_is_delivered_as_watch_messages(
    looped: tuple[Any, Driver],
) -> None:
    system, driver = looped
    probe = driver.call(lambda: system.createActor(ProbeActor))
    data = os.urandom(20_000)  # more than one read: several WatchMessages, then EOF

    reply = driver.ask(probe, WatchPipe(data), 5)

    assert isinstance(reply, Watched)
    assert reply.data == data


def test_a_descriptor_number_reused_within_one_handler_is_still_watched(
    looped: tuple[Any, Driver],
) -> None:
    system, driver = looped
    timer = driver.call(lambda: system.createActor(TimerActor))

    reply = driver.ask(timer, Swap(b"second pipe"), 5)

    assert reply == Watched(b"second pipe")


@pytest.mark.parametrize("seconds", [0.05, 0.3])
def test_wakeups_fire_on_time_on_the_loop_thread(
    looped: tuple[Any, Driver], seconds: float
) -> None:
    system, driver = looped
    timer = driver.call(lambda: system.createActor(TimerActor))
    loop_thread = driver.call(threading.get_ident)

    reply = driver.ask(timer, Arm(seconds), 5)

    assert isinstance(reply, Fired)
    assert 0 <= reply.late_s < 0.05  # the loop sleeps until the wake-up, not to a tick
    assert reply.thread == loop_thread != threading.get_ident()


def test_wakeups_fire_in_deadline_order_whatever_the_order_they_were_armed_in(
    looped: tuple[Any, Driver],
) -> None:
    system, driver = looped
    actor = driver.call(lambda: system.createActor(OrderActor))
    # Hundreds of pending wake-ups (as a busy TurnActor leaves behind) and one an hour away.
    # Distinct delays are 5 ms apart: wider than the time it takes to arm them all.
    seconds = (*(0.05 + (i * 37 % 60) * 0.005 for i in range(300)), 3600.0)

    reply = driver.ask(actor, ArmMany(seconds), 10)

    assert isinstance(reply, FiredOrder)
    expected = sorted(range(300), key=lambda i: (seconds[i], i))
    assert list(reply.order) == expected
    assert reply.worst_late_s < 0.05


def test_a_handler_that_raises_runs_once_and_the_loop_goes_on(
    looped: tuple[Any, Driver],
) -> None:
    system, driver = looped
    probe = driver.call(lambda: system.createActor(ProbeActor))
    other = driver.call(lambda: system.createActor(ProbeActor))

    driver.tell(probe, Explode())

    assert driver.ask(probe, CountCalls(), 0.5) is None  # it stopped (let it crash)
    assert driver.ask(other, CountCalls(), 5) == Calls(0)  # the loop and the others go on


def test_call_runs_on_the_loop_thread_and_hands_back_errors(
    looped: tuple[Any, Driver],
) -> None:
    _system, driver = looped

    assert driver.call(threading.get_ident) != threading.get_ident()
    with pytest.raises(ZeroDivisionError):
        driver.call(lambda: 1 / 0)


def test_an_idle_loop_sleeps_and_wakes_on_demand() -> None:
    system = start_actor_system()
    driver = Driver(system)
    try:
        started = time.monotonic()
        driver.step(0.3)  # nothing pending, nothing due: sleeps the whole timeout
        assert time.monotonic() - started >= 0.25
        threading.Timer(0.05, driver.wake).start()
        started = time.monotonic()
        driver.step(5.0)
        assert time.monotonic() - started < 1.0
    finally:
        driver.close()
        stop_actor_system(system)
