"""RLIMIT_AS / RLIMIT_CPU caps for the forked worker and every child it spawns.

Each ``setrlimit`` is guarded: a limit the platform lacks or a value above the hard limit is
logged and skipped, never fatal — the cgroup and systemd's ``MemoryMax`` stay as backstops.
"""

from __future__ import annotations

import functools
import resource
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ProcessLimits:
    """Address-space (MiB) and CPU-time (s) ceilings for one process."""

    address_space_mb: int
    cpu_s: int


def _set(which: int, name: str, soft: int) -> None:
    try:
        _cur_soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY and soft > hard:
            log.warning("rlimit_over_hard_limit", limit=name, wanted=soft, hard=hard)
            return
        # The hard limit is lowered to the soft one so the child cannot raise it back.
        resource.setrlimit(which, (soft, soft if name == "RLIMIT_AS" else soft + 1))
    except (ValueError, OSError) as exc:
        log.warning("rlimit_not_applied", limit=name, wanted=soft, error=str(exc))


def apply_limits(limits: ProcessLimits) -> None:
    """Apply the caps to the calling process (call it in a fork child)."""
    _set(resource.RLIMIT_AS, "RLIMIT_AS", limits.address_space_mb * 1024 * 1024)
    # SIGXCPU at the soft limit, SIGKILL one second later at the hard one.
    _set(resource.RLIMIT_CPU, "RLIMIT_CPU", limits.cpu_s)


def preexec_with_limits(limits: ProcessLimits) -> Callable[[], None]:
    """A ``preexec_fn`` for subprocess that applies the caps in the child before exec."""
    return functools.partial(apply_limits, limits)
