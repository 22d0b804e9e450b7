"""Applying a ``Confinement`` in a forked child (the worker, a gate run), in order, before any
untrusted code. Only syscalls happen here: the parent prepared everything.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from shelldon.config import SandboxSettings
from shelldon.proc.sandbox.cgroup import TurnCgroup
from shelldon.proc.sandbox.confinement import Confinement, prepare_gate
from shelldon.proc.sandbox.landlock import (
    _apply_prebuilt,
    _landlock_apply,
    _landlock_ruleset,
    landlock_abi,
)
from shelldon.proc.sandbox.paths import gate_never
from shelldon.proc.sandbox.pidns import enter_pid_namespace
from shelldon.proc.sandbox.plan import Plan
from shelldon.proc.sandbox.policy import SandboxError
from shelldon.proc.sandbox.seccomp import build_filter, load_filter
from shelldon.proc.sandbox.userns import _userns_restrict

log = structlog.get_logger(__name__)


_applied: set[str] = set()
"""Layers already on in this process (a resumed worker confines in two steps)."""


def _fail(p: Plan, layer: str, exc: BaseException) -> None:
    if p.mode == "required":
        raise SandboxError(f"sandbox layer {layer} could not be applied: {exc}") from exc
    log.warning("sandbox_layer_failed", layer=layer, error=str(exc))


def _apply_fs(c: Confinement, *, network: bool = False) -> None:
    """The filesystem layer; ``network`` keeps TCP (Landlock) or the host's network namespace
    (userns) for a call that needs it — the socket filter is applied separately."""
    p, ro, rw = c.plan, c.read_only, c.read_write
    userns_before = _userns()
    try:
        if p.fs == "landlock":
            abi = landlock_abi()
            ro = (*ro, "/proc/self")  # resolved now: this process's own, no other's
            if network or not _apply_prebuilt(c.ruleset_fd, abi):
                _landlock_apply(_landlock_ruleset(ro, rw, network=network, abi=abi))
        elif p.fs == "userns":
            _userns_restrict(ro, rw, network=network)
        else:
            return
    except (OSError, SandboxError) as exc:
        if p.fs == "userns" and _userns() != userns_before:
            # Half a namespace is worse than none: stop this process instead of going on.
            raise SandboxError(f"the user namespace layer broke half-way: {exc}") from exc
        _fail(p, p.fs, exc)
        return
    _applied.add("fs")


def _userns() -> str:
    try:
        return os.readlink("/proc/self/ns/user")
    except OSError:
        return ""


def _join_cgroup(c: Confinement) -> None:
    """Move the calling process into ``c``'s cgroup, once."""
    if c.cgroup is None or "cgroup" in _applied:
        return
    try:
        c.cgroup.join()
        _applied.add("cgroup")
    except OSError as exc:
        _fail(c.plan, "cgroup", exc)


def isolate_pids(c: Confinement, *, orphan_exit: int) -> None:
    """Put the calling child (a worker, a gate's pytest before its exec) in its cgroup, then in
    a PID namespace of its own where the plan has one (``pidns.py``): from here on it cannot
    name any process outside, and everything it starts dies with it. The cgroup comes first
    because the process that goes on is forked here: it must be born inside the cgroup."""
    p = c.plan
    if p.mode == "off":
        return
    _join_cgroup(c)
    if not p.pidns or "pidns" in _applied:
        return
    try:
        enter_pid_namespace(orphan_exit=orphan_exit)
    except OSError as exc:
        _fail(p, "pid namespace", exc)
        return
    _applied.add("pidns")


def _apply_seccomp(p: Plan, *, network: bool, namespaces: bool) -> None:
    if not p.seccomp:
        return
    key = f"seccomp-{network}-{namespaces}"
    if key in _applied:
        return
    try:
        load_filter(build_filter(network=network, namespaces=namespaces))
    except (OSError, SandboxError) as exc:
        _fail(p, "seccomp", exc)
        return
    _applied.add(key)


def confine_worker(c: Confinement, *, network: bool, join_cgroup: bool = False) -> None:
    """Confine the calling worker as ``c`` says. ``network=True`` is the first step of a resumed
    turn whose owner-approved RISKY call runs next: only the syscall deny list (and, with
    ``join_cgroup``, the cgroup) go on. ``network=False`` closes everything: the filesystem
    layer and the socket filter too."""
    p = c.plan
    if p.mode == "off":
        return
    if join_cgroup:
        _join_cgroup(c)
    if network:
        # The namespace calls stay allowed only when the user-namespace layer still needs them.
        _apply_seccomp(p, network=True, namespaces=p.fs != "userns")
        return
    if "fs" not in _applied:
        _apply_fs(c)
    _apply_seccomp(p, network=False, namespaces=True)


def confine_call(c: Confinement, *, network: bool) -> None:
    """Confine an approved call's child, inside a resumed worker that is only part-way
    confined: the filesystem layer ``c`` names, the syscall deny list, and unless the call
    needs the network the socket filter too."""
    if c.plan.mode == "off":
        return
    _apply_fs(c, network=network)
    _apply_seccomp(c.plan, network=network, namespaces=True)


def gate_preexec(
    sandbox: SandboxSettings,
    staging: Path,
    private: Path,
    extra_read: Iterable[str],
    *,
    then: Callable[[], None],
    cgroup: TurnCgroup | None,
) -> Callable[[], None]:
    """A ``preexec_fn`` for the gate's pytest: joins ``cgroup``, runs ``then`` (RLIMITs), and
    confines like a FREE-only worker with read-write on the staging dir (and its private tmp)."""
    c = prepare_gate(sandbox, (staging, private), gate_never(staging), extra_read, cgroup)

    def preexec() -> None:
        then()
        if c.plan.mode == "off":
            return
        isolate_pids(c, orphan_exit=1)
        _apply_fs(c)
        _apply_seccomp(c.plan, network=False, namespaces=True)

    return preexec


def filesystem_confined() -> bool:
    """Whether this process is under its filesystem layer (Landlock or the namespace), as
    ``confine_worker`` or ``gate_preexec`` applied it: a self-coded tool runs only then."""
    return "fs" in _applied
