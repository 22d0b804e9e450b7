"""Start and stop shelldon's Thespian actor system: every actor in this process.

The base is Thespian's ``simpleSystemBase``, driven by ``actors.inproc.Driver`` (messages,
wake-ups, watched descriptors). It opens no socket and pickles nothing; workers are forked by
the zygote, never by this process.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import structlog
from thespian.actors import ActorSystem

log = structlog.get_logger(__name__)

BASE = "simpleSystemBase"
"""The one actor-system base: all actors in the service's process."""


class ActorSystemError(RuntimeError):
    """The actor system could not start; the message says what to do."""


def start_actor_system() -> Any:
    """Start a fresh in-process Thespian ``ActorSystem`` and return it."""
    started = time.monotonic()
    try:
        # transientUnique: never hand back an earlier system (Thespian's singleton).
        system = ActorSystem(BASE, {}, logDefs=False, transientUnique=True)
    except Exception as exc:
        raise ActorSystemError(f"actor system ({BASE}) did not start: {exc}") from exc
    log.info("actor_system_started", base=BASE, ms=round((time.monotonic() - started) * 1000, 1))
    return system


def _shutdown_quietly(system: Any) -> None:
    try:
        system.shutdown()
    except Exception:
        log.exception("actor_system_shutdown_failed")


def stop_actor_system(system: Any, *, timeout_s: float = 5.0) -> None:
    """Shut the system down, waiting at most ``timeout_s`` (a handler stuck past it is logged;
    the process is about to exit anyway)."""
    stopper = threading.Thread(target=_shutdown_quietly, args=(system,), daemon=True)
    stopper.start()
    stopper.join(timeout_s)
    if stopper.is_alive():
        log.warning("actor_system_stop_timed_out", timeout_s=timeout_s)
        return
    log.info("actor_system_stopped", base=BASE)
