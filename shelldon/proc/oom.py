"""Why a worker went without a Result, as its turn's cgroup tells it: the kernel's OOM killer
(``memory``) or anything else (``crash``)."""

from __future__ import annotations

from pathlib import Path

from shelldon.proc.sandbox.cgroup import TurnCgroup


def oom_baseline(cgroup_path: str | None) -> int | None:
    """The OOM kills counted so far under the parent of a turn's cgroup (all turns and gate
    runs): read when the turn starts, for ``death_kind``."""
    return TurnCgroup(Path(cgroup_path).parent).oom_kills() if cgroup_path else None


def death_kind(cgroup_path: str | None, baseline: int | None) -> str:
    """Why a worker went without a Result: ``memory`` when the kernel killed its turn for want
    of memory, else ``crash``. Its own cgroup says so while it exists; the zygote removes it as
    soon as the worker is reaped, which may come first, and then the parent's count, which
    holds its descendants' kills, is compared with ``baseline``."""
    if not cgroup_path:
        return "crash"
    own = TurnCgroup(Path(cgroup_path)).oom_kills()
    if own is not None:
        return "memory" if own > 0 else "crash"
    now = oom_baseline(cgroup_path)
    if baseline is not None and now is not None and now > baseline:
        return "memory"
    return "crash"
