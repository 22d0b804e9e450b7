"""Run the service: start the actor system, boot the supervisor, drive the actors until a stop
signal (or the end of a console session, or a fatal error), and stop everything within 5 s."""

from __future__ import annotations

import gc
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from actors.inproc import Driver
from actors.messages import CONSOLE_DONE, Boot, Ping, Status
from actors.system import start_actor_system, stop_actor_system
from shelldon.config import Settings
from shelldon.sdnotify import Notifier

if TYPE_CHECKING:
    from shelldon.worker.zygote import Zygote

log = structlog.get_logger(__name__)

HEALTH_EVERY_S = 5.0
ASK_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Console:
    """Descriptors of a console session: input, output, and a pipe the transport writes to
    when the session is over (end of the demo story, or end of input)."""

    in_fd: int
    out_fd: int
    done_r: int
    done_w: int


def run_service(
    settings: Settings,
    *,
    transport: str = "telegram",
    console: Console | None = None,
    story: tuple[tuple[str, bool], ...] = (),
    auto_yes: bool = False,
    zygote: Zygote | None = None,
) -> int:
    """Run until SIGTERM/SIGINT, the console session ends, or a fatal error; return the exit
    status (0 on a clean stop, 130 after Ctrl-C).

    Every worker is forked by ``zygote`` (started here if the caller did not: it must leave
    before the transport and the broker read their secrets) and stopped here.
    """
    if zygote is None:
        from shelldon.worker.zygote import Zygote

        zygote = Zygote.start(settings)
    fds = (console.in_fd, console.out_fd, console.done_w) if console else ()
    try:
        return _serve(Boot(settings, transport, fds, story, auto_yes, zygote), console)
    finally:
        zygote.stop()


def _serve(boot: Boot, console: Console | None) -> int:
    from actors.supervisor import SupervisorActor

    settings, transport = boot.settings, boot.transport
    # Only this process speaks to systemd (NotifyAccess=main); the notify variables leave the
    # environment so no process started from now on inherits them.
    notifier = Notifier.from_environ()
    notifier.status("starting the actors")
    settings.home.mkdir(parents=True, exist_ok=True)
    settings.workspace.mkdir(parents=True, exist_ok=True)
    from shelldon.proc import sandbox

    # Under systemd's Delegate=yes: the service moves into a leaf so turns get cgroups. First,
    # so that the layers logged next say what turns really get.
    sandbox.prepare_delegated_cgroup(settings.sandbox)
    try:
        # Logs each confinement layer; in "required" mode a missing one stops us here.
        sandbox.check_required(settings)
    except sandbox.SandboxError as exc:
        log.error("sandbox_required_but_missing", error=str(exc))
        print(f"shelldon: {exc}", file=sys.stderr)
        return 2
    stop = {"signal": 0}

    def on_signal(signum: int, _frame: Any) -> None:
        stop["signal"] = signum

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    if transport == "telegram":
        # Imported before the freeze below, with the rest of what the actors use.
        import shelldon.transport.telegram_link  # noqa: F401
    # Objects that exist now are never collected again: a collection would otherwise touch
    # (and copy) every page the zygote still shares with this process.
    gc.collect()
    gc.freeze()
    system = start_actor_system()
    driver = Driver(system)
    # A stop signal must end the driver's sleep at once, not at its next wake-up.
    wakeup_fd = signal.set_wakeup_fd(driver.wake_fd)
    supervisor = None
    status = 1
    try:
        supervisor = system.createActor(SupervisorActor)
        reply = driver.ask(supervisor, boot, ASK_TIMEOUT_S)
        if not isinstance(reply, Status) or not reply.ready:
            log.error("service_not_ready", reply=repr(reply))
            return 1
        log.info(
            "service_ready", ms=round((time.monotonic() - started) * 1000, 1), transport=transport
        )
        notifier.status("waiting for the transport")
        status = _wait(driver, supervisor, console, stop, notifier)
    finally:
        notifier.stopping("stopping")
        driver.shutdown(supervisor)
        signal.set_wakeup_fd(wakeup_fd)
        driver.close()
        stop_actor_system(system)
        notifier.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return status


def health_every_s(watchdog_s: float | None) -> float:
    """How often the main process pings the supervisor: every ``HEALTH_EVERY_S``, and at least
    three times per systemd watchdog interval (so one slow answer does not trip it)."""
    if watchdog_s is None:
        return HEALTH_EVERY_S
    return max(0.05, min(HEALTH_EVERY_S, watchdog_s / 3))


def _wait(
    driver: Driver,
    supervisor: Any,
    console: Console | None,
    stop: dict[str, int],
    notifier: Notifier,
) -> int:
    every = health_every_s(notifier.watchdog_s)
    polling = False
    done: dict[str, int | None] = {"console": None}

    def console_done() -> None:
        assert console is not None
        # An end nobody announced (a transport that died) is a failure.
        done["console"] = 0 if os.read(console.done_r, 16) == CONSOLE_DONE else 1

    if console is not None:
        driver.add_reader(console.done_r, console_done)
    while not stop["signal"]:
        # The actors run here, in this thread, until it is time for a health check (every
        # tick until the transport polls: READY=1 should follow it closely).
        until = time.monotonic() + (every if polling else min(0.2, every))
        while not stop["signal"] and done["console"] is None and time.monotonic() < until:
            driver.step(max(0.0, until - time.monotonic()))
        if done["console"] is not None:
            return done["console"]
        if stop["signal"]:
            break
        status = driver.ask(supervisor, Ping(), ASK_TIMEOUT_S)
        if isinstance(status, Status) and status.fatal:
            log.error("service_stopping_fatal", reason=status.fatal)
            return status.exit_status or 1
        if status is None:
            log.error("supervisor_unresponsive")
            return 1
        if not isinstance(status, Status):
            # No WATCHDOG=1 without a healthy answer: systemd restarts a wedged service.
            continue
        notifier.watchdog()
        if status.polling and not polling:
            polling = True
            notifier.ready("running")
            log.info("service_polling", watchdog_s=notifier.watchdog_s, health_every_s=every)
    log.info("service_stopping", signal=stop["signal"])
    return stopped_status(stop["signal"])


def stopped_status(signum: int) -> int:
    """Exit status after a stop signal: SIGTERM is the service manager's clean stop (0);
    SIGINT is someone's Ctrl-C, reported as interrupted (128 + 2 = 130), as shells do."""
    return 128 + signum if signum == signal.SIGINT else 0
