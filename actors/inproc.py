"""Run Thespian's ``simpleSystemBase`` as a real event loop: one process, one thread of actors.

Why: every actor of a multiprocess base is a Python process of its own (6-10 MB of private
pages each on 3.11), and every message is pickled over TCP (~1-4 ms a hop). On a 416 MB Pi one
process is what fits the budget. ``simpleSystemBase`` alone cannot serve: it runs actors only
inside ``ask``/``tell``/``listen``, sleeps through its wake-ups, and has no ``ThespianWatch``.

``Driver`` supplies the missing loop. An actor watches as on the multiprocess bases, by
returning ``ThespianWatch(fds)`` from ``receiveMessage`` (the list holds until its next
message); a readable descriptor becomes a ``WatchMessage``. Other threads never touch the actor
system: ``call`` runs a function on the loop's thread.

``poll`` (not epoll) on purpose: it keeps no kernel state, so a descriptor number that an actor
closed and reused for a new worker channel within one batch of messages is simply watched anew.
"""

from __future__ import annotations

import contextlib
import heapq
import math
import os
import queue
import select
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import structlog
from thespian.actors import ActorExitRequest, ThespianWatch, WatchMessage
from thespian.system import isInternalActorSystemMessage, simpleSystemBase
from thespian.system.timing import ExpirationTimer

log = structlog.get_logger(__name__)

_READABLE = select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR | select.POLLNVAL
# Longest sleep with nothing due: a bound, not a tick (everything that matters wakes the poll).
MAX_SLEEP_S = 1.0


def _receive_keeping_watch(instance: Any, msg: Any, sender: Any) -> None:
    """simpleSystemBase's ``actor_base_receive``, keeping a ``ThespianWatch`` that the actor's
    ``receiveMessage`` returns (the original drops the return value)."""
    result = instance.receiveMessage(msg, sender)
    instance._shelldon_watch = tuple(result.filenos) if isinstance(result, ThespianWatch) else ()


class _WakeupHeap:
    """simpleSystemBase's pending wake-ups as a heap.

    Thespian keeps them in a list that it scans (building a timer view per entry) before every
    message it delivers, and again for the earliest one. A TurnActor leaves a deadline wake-up
    behind for every turn (Thespian cannot cancel one), so a busy hour makes each message pay
    for a scan of dozens: measured at ~6 ms of a 35 ms turn. Here adding, popping what is due
    and finding the next are O(log n) or O(1); entries and timers are Thespian's own.
    """

    def __init__(self, base: Any) -> None:
        assert not base._wakeUps, "the Driver comes before the first actor and its wake-ups"
        self._heap: list[tuple[float, int, Any, Any, Any]] = []
        self._seq = 0
        base._add_wakeup = self.add
        base._pop_expired_wakeups = self.pop_expired
        base._next_wakeup = self.next_due
        base.add_wakeups_to_status = self.add_to_status

    def add(self, from_actor: Any, time_period: Any, payload: Any) -> None:
        timer = ExpirationTimer(time_period)
        at = timer._time_to_quit
        self._seq += 1
        heapq.heappush(
            self._heap, (math.inf if at is None else at, self._seq, from_actor, timer, payload)
        )

    def pop_expired(self, now: float) -> list[tuple[Any, Any, Any]]:
        due = []
        while self._heap and self._heap[0][0] <= now:
            _at, _seq, address, timer, payload = heapq.heappop(self._heap)
            due.append((address, timer, payload))
        return due

    def next_due(self) -> Any:
        return self._heap[0][3] if self._heap else None

    def add_to_status(self, status: Any) -> Any:
        status.addWakeups([(address, timer) for _at, _seq, address, timer, _p in self._heap])
        return status


class Driver:
    """The event loop of an in-process (``simpleSystemBase``) actor system. Create it before
    the first actor."""

    def __init__(self, system: Any) -> None:
        # Each actor binds actor_base_receive when it is created.
        simpleSystemBase.actor_base_receive = _receive_keeping_watch
        self.system = system
        self._base = system._systemBase
        _WakeupHeap(self._base)
        # wake_fd: also what ``signal.set_wakeup_fd`` gets, so a signal ends the sleep.
        self._wake_r, self.wake_fd = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self.wake_fd, False)
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._readers: dict[int, Callable[[], None]] = {}
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._owner = threading.get_ident()

    def run_pending(self) -> None:
        """Deliver every pending message and every wake-up that is due."""
        base = self._base
        base._realizeWakeups()
        base._runSends()

    def _watched(self) -> dict[int, list[Any]]:
        wanted: dict[int, list[Any]] = {}
        for ref in list(self._base.actorRegistry.values()):
            instance = getattr(ref, "instance", None) if ref is not None else None
            for fd in getattr(instance, "_shelldon_watch", ()):
                wanted.setdefault(fd, []).append(ref.address)
        return wanted

    def _sleep_s(self, limit: float) -> float:
        due = self._base._next_wakeup()
        if due is None:
            return limit
        return max(0.0, min(limit, float(due.view().remainingSeconds())))

    def step(self, timeout: float = MAX_SLEEP_S) -> None:
        """One turn of the loop: deliver, wait for a descriptor or a wake-up, deliver."""
        self.run_pending()
        self._run_calls()
        watched = self._watched()
        poller = select.poll()
        poller.register(self._wake_r, select.POLLIN)
        for fd in (*watched, *self._readers):
            poller.register(fd, select.POLLIN | select.POLLPRI)
        busy = self._base._pendingSends or not self._calls.empty()
        sleep_s = 0.0 if busy else self._sleep_s(timeout)
        try:
            events = poller.poll(sleep_s * 1000)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; a raising handler lands here
            events = []
        # ActorAddress is not hashable: key by its string, keep the address alongside.
        ready: dict[str, tuple[Any, list[int]]] = {}
        for fd, mask in events:
            if not mask & _READABLE:
                continue
            if fd == self._wake_r:
                with contextlib.suppress(BlockingIOError, OSError):
                    while os.read(self._wake_r, 4096):
                        pass
                continue
            for address in watched.get(fd, ()):
                ready.setdefault(address.actorAddressString, (address, []))[1].append(fd)
            reader = self._readers.get(fd)
            if reader is not None:
                reader()
        for address, fds in ready.values():
            self._base.actor_send(address, address, WatchMessage(fds))
        self._run_calls()
        self.run_pending()

    def wake(self) -> None:
        """Cut the current sleep short (safe from any thread and from signal handlers)."""
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self.wake_fd, b"!")

    def call(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run ``fn`` on the loop's thread (at once if on that thread); return its result."""
        if threading.get_ident() == self._loop_ident():
            return fn()
        future: Future[Any] = Future()
        self._calls.put((fn, future))
        self.wake()
        return future.result(timeout)

    def _loop_ident(self) -> int:
        if self._thread is not None:
            return self._thread.ident or 0
        return self._owner

    def _run_calls(self) -> None:
        while True:
            try:
                fn, future = self._calls.get_nowait()
            except queue.Empty:
                return
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the caller, who re-raises it
                future.set_exception(exc)

    def add_reader(self, fd: int, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop's thread whenever ``fd`` is readable."""
        self._readers[fd] = callback

    def start_thread(self, name: str = "actors") -> None:
        """Run the loop in a daemon thread (tests and embedders); ``close`` ends it."""
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping:
            self.step()

    def ask(self, address: Any, message: Any, timeout: float = 10.0) -> Any:
        """Ask an actor from any thread; the answer, or None past ``timeout``.

        Thespian's own ``ask`` on this base returns as soon as nothing is pending, so an answer
        that waits for a descriptor (a worker, an HTTP reply) would be missed: this one runs
        the loop until the answer arrives. Answers nobody waited for are dropped first.
        """
        if threading.get_ident() != self._loop_ident():
            return self.call(lambda: self.ask(address, message, timeout), timeout + 1.0)
        requester = self._base.actorRegistry["System:ExternalRequester"].instance
        stale = getattr(requester, "responses", None)
        if stale:
            stale.clear()
        self.system.tell(address, message)
        end = time.monotonic() + timeout
        while True:
            answers = getattr(requester, "responses", None)
            while answers:
                answer = answers.pop(0)
                if not isInternalActorSystemMessage(answer):
                    return answer
            left = end - time.monotonic()
            if left <= 0:
                return None
            self.step(min(left, MAX_SLEEP_S))

    def tell(self, address: Any, message: Any) -> None:
        """Send a message from any thread."""
        self.call(lambda: self.system.tell(address, message))

    def shutdown(self, root: Any, timeout_s: float = 3.0) -> None:
        """Stop the actors under ``root`` (None: none was created), on the loop's thread: its
        ``ActorExitRequest`` cascades to its children, whose handlers close their threads,
        workers and gate runs; delivered until nothing is pending or ``timeout_s`` has passed.
        Best effort: a failure is logged, never raised (the caller is stopping anyway)."""
        if root is None:
            return
        try:
            self.system.tell(root, ActorExitRequest())
            end = time.monotonic() + timeout_s
            while self._base._pendingSends and time.monotonic() < end:
                self.run_pending()
        except Exception:
            log.exception("actors_stop_failed")

    def close(self) -> None:
        if self._thread is not None:
            self._stopping = True
            self.wake()
            self._thread.join(5.0)
            self._thread = None
        for fd in (self._wake_r, self.wake_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
