"""How one child will be confined: a value prepared in the parent, applied in the child.

``prepare_worker`` and ``prepare_gate`` decide everything before the fork (the plan, the path
lists, the seccomp programs, the prebuilt Landlock ruleset, the turn's cgroup); the child
captures the value and only makes syscalls: nothing is handed across the fork in module state.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from shelldon.config import SandboxSettings, Settings
from shelldon.proc.sandbox.cgroup import TurnCgroup, open_turn_cgroup
from shelldon.proc.sandbox.landlock import Rulesets, landlock_abi
from shelldon.proc.sandbox.paths import (
    allowed_paths,
    live_tools_read,
    never_paths,
    worker_paths,
)
from shelldon.proc.sandbox.plan import Plan, plan
from shelldon.proc.sandbox.policy import SandboxError
from shelldon.proc.sandbox.seccomp import build_filter

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Confinement:
    """What a child gets: the ``plan`` (mode, seccomp, filesystem layer), the paths it may read
    and write, a Landlock ruleset the parent prebuilt for exactly those paths (a descriptor the
    child keeps open until it applies it; None: the child builds its own) and its cgroup. Under
    Landlock it may also read its own ``/proc/self``: that rule names its ``/proc/<pid>``, for
    the children it forks too (they share its domain); what keeps them out of it is that a
    worker is not dumpable and their capabilities are dropped."""

    plan: Plan
    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ()
    ruleset_fd: int | None = None
    cgroup: TurnCgroup | None = None

    def keep_fds(self) -> tuple[int, ...]:
        """Descriptors the child must not close before it is confined."""
        return (self.ruleset_fd,) if self.ruleset_fd is not None else ()


_turn_numbers = itertools.count(1)


def prepare_worker(settings: Settings, rulesets: Rulesets | None = None) -> Confinement:
    """A turn's worker: read-write on the workspace only, read-only the live self-coded tools,
    its own cgroup (the caller owns it: ``close()`` at the end); its Landlock ruleset from
    ``rulesets`` (None: the worker builds its own)."""
    p = plan(settings.sandbox)
    if p.mode == "off":
        return Confinement(p)
    ro, rw = worker_paths(settings.workspace, never_paths(settings), live_tools_read(settings))
    ruleset = None
    try:
        if p.seccomp:
            build_filter(network=True, namespaces=p.fs != "userns")
            build_filter(network=False, namespaces=True)
        if p.fs == "landlock" and rulesets is not None:
            ruleset = rulesets.get(ro, rw, network=False, abi=landlock_abi())
    except (SandboxError, OSError) as exc:
        log.warning("sandbox_not_prepared", error=str(exc))
    name = f"shelldon-turn-{os.getpid()}-{next(_turn_numbers)}"
    return Confinement(p, ro, rw, ruleset, open_turn_cgroup(settings.sandbox, name))


def prepare_call(settings: Settings) -> Confinement:
    """An owner-approved RISKY call: read-write on the workspace, system files read-only, and
    nothing else of the home (the vault, the database), no credentials, no parents' ``/proc``.
    No cgroup of its own (it is in its turn's) and no prebuilt ruleset: the call child adds its
    private temp dir to ``read_write`` and builds its own (``with_private_dir``)."""
    p = plan(settings.sandbox)
    if p.mode == "off":
        return Confinement(p)
    ro, rw = worker_paths(settings.workspace, never_paths(settings))
    if p.seccomp:
        build_filter(network=True, namespaces=True)
        build_filter(network=False, namespaces=True)
    return Confinement(p, ro, rw)


def with_private_dir(c: Confinement, path: Path) -> Confinement:
    """``c`` with ``path`` read-write too (a child's own temp dir, made after the fork)."""
    return replace(c, read_write=(*c.read_write, os.path.realpath(path)), ruleset_fd=None)


def prepare_gate(
    sandbox: SandboxSettings,
    writable: Iterable[Path],
    never: Iterable[Path],
    extra_read: Iterable[str],
    cgroup: TurnCgroup | None,
) -> Confinement:
    """A gate run: read-write on its staging dir (and private tmp), ``extra_read`` for pytest's
    packages, ``cgroup`` made by the caller."""
    p = plan(sandbox)
    if p.mode == "off":
        return Confinement(p, cgroup=cgroup)
    ro, rw = allowed_paths(writable, never, extra_read)
    if p.seccomp:
        build_filter(network=False, namespaces=True)  # built here, so the child only loads it
    return Confinement(p, ro, rw, None, cgroup)
