"""A cgroup per turn under the delegated subtree: memory.max, pids.max and cgroup.kill."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.config import SandboxSettings
from shelldon.proc.sandbox.userns import _write

log = structlog.get_logger(__name__)


def _v2_mount() -> Path | None:
    # A hybrid layout mounts v2 at .../unified; /sys/fs/cgroup itself is v2 only if it has
    # cgroup.controllers (a v1 layout there has no such file).
    unified, root = Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")
    if (unified / "cgroup.controllers").exists() or (unified / "cgroup.procs").exists():
        return unified
    return root if (root / "cgroup.controllers").exists() else None


_SERVICE_LEAF = "service"


def delegated_cgroup() -> Path | None:
    """This service's own cgroup when systemd delegated it (``Delegate=yes``): the directory
    is ours (owned by our uid, or marked with the ``trusted.delegate``/``user.delegate`` xattr)."""
    base = _v2_mount()
    if base is None:
        return None
    try:
        with open("/proc/self/cgroup", encoding="ascii") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    rel = next((line[3:] for line in lines if line.startswith("0::")), None)
    if not rel or rel == "/":
        return None
    path = base / rel.lstrip("/")
    if path.name == _SERVICE_LEAF:
        path = path.parent  # prepare_delegated_cgroup moved us into <delegated>/service
    marked = False
    for attr in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError):
            os.getxattr(path, attr)
            marked = True
    try:
        owned = os.geteuid() != 0 and path.stat().st_uid == os.geteuid()
    except OSError:
        return None
    return path if (marked or owned) and os.access(path, os.W_OK) else None


def cgroup_parent(sandbox: SandboxSettings) -> Path | None:
    """Where per-turn cgroups go: ``[sandbox] cgroup`` if set, else the delegated subtree's
    ``turns`` child (created by ``prepare_delegated_cgroup``), else None (RLIMITs only)."""
    if sandbox.cgroup:
        path = Path(sandbox.cgroup)
        return path if (path / "cgroup.procs").exists() and os.access(path, os.W_OK) else None
    delegated = delegated_cgroup()
    if delegated is not None and (delegated / "turns" / "cgroup.procs").exists():
        return delegated / "turns"
    return None


def prepare_delegated_cgroup(sandbox: SandboxSettings | None = None) -> Path | None:
    """At service start, under ``Delegate=yes``: move the service into ``<cg>/service``, enable
    the memory and pids controllers for children and create ``<cg>/turns``, capped as a whole
    (``turns_memory_max_mb``, ``turns_pids_max``: every turn and gate run together stays
    below what would make systemd's ``MemoryHigh``/``TasksMax`` squeeze the service itself);
    returns it."""
    sandbox = sandbox or SandboxSettings()
    delegated = delegated_cgroup()
    if delegated is None:
        return None
    try:
        leaf = delegated / _SERVICE_LEAF
        leaf.mkdir(exist_ok=True)
        for pid in (delegated / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                (leaf / "cgroup.procs").write_text(pid)
        available = (delegated / "cgroup.controllers").read_text().split()
        wanted = [c for c in ("memory", "pids") if c in available]
        if wanted:
            (delegated / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        turns = delegated / "turns"
        turns.mkdir(exist_ok=True)
        if wanted:
            with contextlib.suppress(OSError):
                (turns / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
        _set_caps(
            turns,
            (
                ("memory.max", str(sandbox.turns_memory_max_mb * _MB)),
                ("memory.swap.max", "0"),
                ("pids.max", str(sandbox.turns_pids_max)),
            ),
        )
    except OSError as exc:
        log.warning("cgroup_delegation_unusable", cgroup=str(delegated), error=str(exc))
        return None
    return turns


@dataclass(frozen=True, slots=True)
class TurnCgroup:
    """One turn's (or gate run's) cgroup: the child joins it, the parent kills and removes it."""

    path: Path

    def join(self) -> None:
        """Move the calling process into this cgroup (call it in the child, before it runs code)."""
        _write(str(self.path / "cgroup.procs"), "0")

    def adopt(self, pid: int) -> None:
        """Move ``pid`` (a child just forked) into this cgroup from the parent's side: a
        migration costs ~3 ms (the kernel syncs RCU), and done here it overlaps the child's own
        start-up. Raises ``OSError``; the caller kills the child on failure."""
        _write(str(self.path / "cgroup.procs"), str(pid))

    def kill(self) -> None:
        """SIGKILL every process in the cgroup, ``setsid`` and double-forked stragglers too."""
        with contextlib.suppress(OSError):
            _write(str(self.path / "cgroup.kill"), "1")

    def close(self, timeout_s: float = 1.0) -> None:
        """Kill what is left and remove the cgroup (waits briefly for the kernel to empty it)."""
        self.kill()
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as exc:
                if time.monotonic() >= deadline:
                    log.warning("cgroup_not_removed", cgroup=str(self.path), error=str(exc))
                    return
                time.sleep(0.002)

    def oom_kills(self) -> int | None:
        """How many of its processes (its descendants' included) the kernel killed for want of
        memory; None where that cannot be read (no memory controller, the cgroup is gone)."""
        try:
            events = (self.path / "memory.events").read_text().split("\n")
        except OSError:
            return None
        counts = dict(line.split() for line in events if line.count(" ") == 1)
        return int(counts.get("oom_kill", "0"))

    def pids(self) -> list[int]:
        """The processes now in the cgroup."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []


def open_turn_cgroup(sandbox: SandboxSettings, name: str) -> TurnCgroup | None:
    """Create ``<parent>/<name>`` with ``memory.max``/``pids.max`` where those controllers exist;
    None when there is no usable cgroup parent or the mode is ``off``."""
    if sandbox.mode == "off":
        return None
    parent = cgroup_parent(sandbox)
    if parent is None:
        return None
    path = parent / name
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        log.warning("cgroup_not_created", cgroup=str(path), error=str(exc))
        return None
    _set_caps(
        path,
        (
            ("memory.max", str(sandbox.memory_max_mb * _MB)),
            ("memory.swap.max", "0"),
            # Out of memory, the whole turn goes (not just its largest process): the worker
            # cannot carry on half-killed, and the owner is told why (``oom_killed``).
            ("memory.oom.group", "1"),
            ("pids.max", str(sandbox.pids_max)),
        ),
    )
    return TurnCgroup(path)


_MB = 1024 * 1024


def _set_caps(path: Path, caps: tuple[tuple[str, str], ...]) -> None:
    """Write each knob the cgroup has (a missing controller has no file: skipped)."""
    for knob, value in caps:
        if (path / knob).exists():
            try:
                _write(str(path / knob), value)
            except OSError as exc:
                log.warning("cgroup_cap_not_set", cgroup=str(path), knob=knob, error=str(exc))
