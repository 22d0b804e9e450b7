"""Start and stop shelldon's Thespian actor system: hardened, loopback-only, on a fixed port.

``start_actor_system`` applies ``actors.hardening`` first, refuses a port that something already
listens on (a stale Admin would silently be reused), and returns a ``RunningSystem`` handle.
``stop_actor_system`` asks Thespian to shut down, then SIGKILLs whatever is left and checks that
no process of the system survives, all within the timeout (5 s by default). The Admin is a
child of the starting process and dies with it (``actors.hardening.guard_process_start``):
start and stop the system from the main thread of the process that owns it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import structlog

from actors import proctree
from actors.hardening import LOOPBACK_V4, harden_thespian, take_admin_process
from shelldon.config import IN_PROCESS_BASE, ISOLATED_BASE

log = structlog.get_logger(__name__)

STOP_TIMEOUT_S = 5.0
# A valid logging config for Thespian's own logger process, which receives nothing once
# hardened; ``False`` (its "no logging" value) crashes multiproc actor start-up in 4.0.1.
_LOGGER_PROCESS_LOGDEFS: dict[str, Any] = {"version": 1, "disable_existing_loggers": False}


class ActorSystemError(RuntimeError):
    """The actor system could not start, or did not stop cleanly; the message says what to do."""


@dataclass(frozen=True, slots=True)
class RunningSystem:
    """A started actor system: the Thespian ``ActorSystem`` to talk to, and how to find its
    processes (every one lives in the Admin's session or descends from a process that does)."""

    system: Any
    base: str
    admin_port: int
    admin: Any  # the Admin's multiprocessing.Process (None for the in-process base)

    @property
    def session_id(self) -> int | None:
        """The Admin's pid, which is also the session id of the system's processes."""
        return None if self.admin is None else int(self.admin.pid)

    def pids(self) -> set[int]:
        """Live processes of the system (empty for the in-process base)."""
        if self.session_id is None:
            return set()
        return proctree.with_descendants(proctree.session_members(self.session_id))

    def __enter__(self) -> RunningSystem:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stop_actor_system(self)


def _check_port_free(port: int) -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((LOOPBACK_V4, port))
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        holders = sorted(proctree.listeners_on_port(port))
        raise ActorSystemError(
            f"actor admin port {port} is already in use (pids {holders or 'unknown'}): stop the "
            "old service or set another [actors] admin_port"
        ) from None
    finally:
        probe.close()


def start_actor_system(
    *,
    admin_port: int,
    base: str = ISOLATED_BASE,
    capabilities: Mapping[str, Any] | None = None,
) -> RunningSystem:
    """Harden Thespian, start a fresh actor system of ``base`` with its Admin on
    127.0.0.1:``admin_port``, and return its handle."""
    from thespian.actors import ActorSystem

    in_process = base == IN_PROCESS_BASE
    if not in_process:
        # The in-process base opens no socket and pickles nothing: nothing to harden.
        harden_thespian()
        _check_port_free(admin_port)
    caps: dict[str, Any] = {"Admin Port": admin_port, "Process Startup Method": "fork"}
    caps.update(capabilities or {})
    started = time.monotonic()
    try:
        # transientUnique: never hand back an earlier system of the same base (Thespian's
        # singleton would ignore the new port and capabilities).
        system = ActorSystem(
            base,
            caps,
            logDefs=False if in_process else _LOGGER_PROCESS_LOGDEFS,
            transientUnique=True,
        )
    except Exception as exc:
        raise ActorSystemError(f"actor system ({base}) did not start: {exc}") from exc
    admin = None if in_process else take_admin_process()
    running = RunningSystem(system, base, admin_port, admin)
    log.info(
        "actor_system_started",
        base=base,
        admin_port=admin_port,
        processes=len(running.pids()),
        ms=round((time.monotonic() - started) * 1000, 1),
    )
    return running


def _shutdown_quietly(system: Any) -> None:
    try:
        system.shutdown()
    except Exception:
        log.exception("actor_system_shutdown_failed")


def stop_actor_system(running: RunningSystem, *, timeout_s: float = STOP_TIMEOUT_S) -> None:
    """Shut the system down within ``timeout_s``: ask Thespian, then SIGKILL what is left.

    Raises ``ActorSystemError`` naming the pids if any process of the system survives.
    """
    deadline = time.monotonic() + timeout_s
    # Thespian's shutdown waits up to 10 s for an actor stuck in a handler: give it most of our
    # budget in a thread and keep the rest to kill and verify.
    stopper = threading.Thread(target=_shutdown_quietly, args=(running.system,), daemon=True)
    stopper.start()
    stopper.join(max(0.0, timeout_s - 1.5))
    left = running.pids()
    if left:
        log.warning("actor_system_killing_leftovers", pids=sorted(left))
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = {pid for pid in left if proctree.is_alive(pid)}
    if running.admin is not None:
        running.admin.join(max(0.0, deadline - time.monotonic()))  # reap our child
    if left:
        raise ActorSystemError(
            f"actor system processes {sorted(left)} survived SIGKILL; check them with ps"
        )
    log.info("actor_system_stopped", base=running.base, admin_port=running.admin_port)
