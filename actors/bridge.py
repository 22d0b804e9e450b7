"""An asyncio loop in a daemon thread whose results come back through a pipe an actor watches.

Thespian handlers must never block. An actor that needs async I/O (the broker's provider call,
the transport's HTTP) submits a coroutine here, ``watch``es its ``fileno`` and drains the
finished results when its ``WatchMessage`` says the pipe is readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any


class AsyncBridge:
    """Runs coroutines on a private event loop; ``drain()`` hands back (tag, result, error)."""

    def __init__(self, name: str = "bridge") -> None:
        self.loop = asyncio.new_event_loop()
        self._done: queue.SimpleQueue[tuple[Any, Any, BaseException | None]] = queue.SimpleQueue()
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def fileno(self) -> int:
        """The descriptor that becomes readable when a result is ready."""
        return self._read_fd

    def submit(self, coro: Coroutine[Any, Any, Any], tag: Any) -> Future[Any]:
        """Run ``coro`` on the loop; its outcome is queued under ``tag``."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        future.add_done_callback(lambda f: self._finished(tag, f))
        return future

    def notify(self, tag: Any, value: Any = None) -> None:
        """Queue a value from the loop's side (e.g. an inbound event) and wake the actor."""
        self._done.put((tag, value, None))
        self._wake()

    def _finished(self, tag: Any, future: Future[Any]) -> None:
        if future.cancelled():
            self._done.put((tag, None, asyncio.CancelledError()))
        else:
            error = future.exception()
            self._done.put((tag, None if error else future.result(), error))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._write_fd, b"!")

    def drain(self) -> list[tuple[Any, Any, BaseException | None]]:
        """Every outcome ready now, in completion order."""
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._read_fd, 4096):
                pass
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    def close(self, timeout: float = 2.0) -> None:
        """Stop the loop and its thread, and close the pipe."""
        if self.loop.is_running():

            async def _cancel_all() -> None:
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(timeout)
            self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        for fd in (self._read_fd, self._write_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
