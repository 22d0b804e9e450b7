"""A forked worker's first steps, before it trusts itself to run a turn: signals, descriptors,
stdio, environment, RLIMITs and the kernel confinement, in that order."""

from __future__ import annotations

import _signal
import contextlib
import os
import signal
import sys

import structlog

from shelldon.config import Settings
from shelldon.proc import sandbox
from shelldon.proc.limits import ProcessLimits, apply_limits
from shelldon.proc.ties import die_with_parent
from shelldon.secrets import forget_env_secrets
from shelldon.worker.handle import EXIT_CHANNEL

ENV_ALLOWLIST = ("PATH", "HOME", "LANG", "TZ")
"""The only environment variables a worker keeps; everything else (secrets above all) goes."""

# Computed once in the parent: signal.valid_signals() builds ~60 enums (~0.6 ms) per call.
_CATCHABLE = tuple(
    int(sig) for sig in signal.valid_signals() if sig not in (signal.SIGKILL, signal.SIGSTOP)
)
_IGNORED_AT_START = (int(signal.SIGPIPE), int(signal.SIGXFSZ))


def reset_signals() -> None:
    """Give every catchable signal its start-up disposition and unblock them all: the actor's
    handlers must not run in the worker. SIGPIPE and SIGXFSZ stay ignored, as Python sets them
    at start-up, so a write to a closed channel is an error, not a death."""
    for sig in _CATCHABLE:
        handler = _signal.SIG_IGN if sig in _IGNORED_AT_START else _signal.SIG_DFL
        # _signal is the C module under signal: the same syscall without the enum wrapping
        # that costs ~6 µs a call. Every signal is set, even where Python's table says it is
        # already default: a handler set outside Python (faulthandler's) is not in that table.
        try:
            _signal.signal(sig, handler)
        except (OSError, ValueError):
            continue
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def close_inherited_fds(keep: int, *also: int) -> None:
    """Close every descriptor except 0, 1, 2, ``keep`` (the channel) and ``also`` (prebuilt
    confinement rulesets, consumed before any tool runs)."""
    kept = sorted({fd for fd in (keep, *also) if fd > 2})
    top = max(os.sysconf("SC_OPEN_MAX"), kept[-1] + 2 if kept else 4)
    # closerange uses the close_range syscall where the kernel has it: one call, any fd count.
    start = 3
    for fd in kept:
        if fd > start:
            os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, top)


def reopen_stdio() -> None:
    """Point ``sys.stdout``/``sys.stderr`` at descriptors 1 and 2 if they wrapped another fd:
    one inherited from the parent may write to a descriptor the worker just closed (a capture
    file, a redirected log), and logging through it would crash the turn."""
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        try:
            ours = stream.fileno() == fd
        except (AttributeError, OSError, ValueError):
            ours = False
        if not ours:
            replacement = open(  # noqa: SIM115 - lives as long as the worker, closed by _exit
                fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
            )
            setattr(sys, name, replacement)


def scrub_environment() -> None:
    """Replace ``os.environ`` (and the C environment under it) with the allowlisted variables."""
    for name in [name for name in os.environ if name not in ENV_ALLOWLIST]:
        del os.environ[name]  # os.environ's __delitem__ also unsetenv()s the C environment


def prepare_child(
    keep_fd: int,
    parent_pid: int,
    settings: Settings,
    turn_id: str,
    confinement: sandbox.Confinement,
    *,
    network: bool = False,
) -> None:
    """Everything the worker does before it trusts itself to run a turn, in this order."""
    reset_signals()
    # The parent died before this took effect: nobody will read our Result.
    die_with_parent(parent_pid, EXIT_CHANNEL)
    # Not dumpable (also when forked by a parent that is): the children it forks for tools
    # and approved calls cannot open its /proc/<pid>/mem, environ or fd/.
    sandbox.forbid_dumps()
    # Its cgroup, then a PID namespace of its own: from here on nothing it runs can name a
    # process outside its turn, and whatever it starts dies with it. The process that called
    # this stays outside as a stub that holds nothing and mirrors the exit.
    sandbox.isolate_pids(confinement, orphan_exit=EXIT_CHANNEL)
    close_inherited_fds(keep_fd, *confinement.keep_fds())
    reopen_stdio()
    scrub_environment()
    # Relative paths a self-coded tool uses land in the workspace (the one place it may write).
    with contextlib.suppress(OSError):
        os.chdir(settings.workspace)
    # Defense in depth: a forking process that once read a secret from its environment still
    # holds it in shelldon.secrets; the worker lets go of it before any tool runs.
    forget_env_secrets()
    lim = settings.limits
    apply_limits(ProcessLimits(address_space_mb=lim.rlimit_as_mb, cpu_s=lim.rlimit_cpu_s))
    # Confined before any tool is imported or run. A plain turn runs a tool only after the
    # parent's first Completion, by which time the parent has moved it into the cgroup; a
    # resume runs its approved call at once, so it joins by itself first (and its second
    # ``confine_worker`` call, after that call, closes the rest).
    sandbox.confine_worker(confinement, network=network, join_cgroup=network)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(actor="worker", turn_id=turn_id)
