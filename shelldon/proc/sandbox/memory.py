"""Which memory caps are really in force, and the address-space cap a turn falls back to.

A stock Raspberry Pi kernel boots with the memory cgroup controller off unless its command line
says ``cgroup_enable=memory``. Then the unit's ``MemoryMax``/``MemoryHigh`` do nothing and no
turn's cgroup gets a ``memory.max``: ``RLIMIT_AS`` is all that bounds a runaway. So where no
per-turn memory cap can be made, every worker, gate run and tool child gets an address-space
cap sized to the device instead of the configured one, small enough that the service and one
turn fit in its memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from shelldon.config import SandboxSettings, Settings
from shelldon.proc.sandbox.cgroup import cgroup_parent, delegated_cgroup

CMDLINE_FIX = "add cgroup_enable=memory to /boot/firmware/cmdline.txt, then reboot"
"""How an owner turns the memory controller on (Raspberry Pi OS bookworm)."""

SERVICE_SHARE_MB = 200
"""Memory the fallback leaves to the system and the service itself (its peak PSS budget is
150 MB), before the rest is split between a worker and the tool child it forks."""

FALLBACK_FLOOR_MB = 160
"""The smallest address-space cap a worker gets: a Python worker maps ~45 MB before it
allocates anything, and a gate's pytest a little more."""


def kernel_memory_controller(proc_cgroups: Path = Path("/proc/cgroups")) -> bool:
    """Whether the kernel has the memory cgroup controller enabled (``/proc/cgroups``)."""
    with contextlib.suppress(OSError):
        for line in proc_cgroups.read_text().splitlines():
            fields = line.split()
            if len(fields) == 4 and fields[0] == "memory":
                return fields[3] == "1"
    return False


def lists_memory(path: Path) -> bool:
    """Whether the cgroup file ``path`` (``cgroup.controllers``, ``cgroup.subtree_control``)
    lists the memory controller; False when it cannot be read."""
    try:
        return "memory" in path.read_text().split()
    except OSError:
        return False


def turn_memory_cap(sandbox: SandboxSettings) -> bool:
    """Whether each turn's cgroup gets a ``memory.max``: there is a cgroup for turns and the
    memory controller reaches it (before or after ``prepare_delegated_cgroup``)."""
    if sandbox.mode == "off":
        return False
    parent = cgroup_parent(sandbox)
    if parent is not None:
        return lists_memory(parent / "cgroup.subtree_control")
    if sandbox.cgroup:
        return False
    delegated = delegated_cgroup()
    return delegated is not None and lists_memory(delegated / "cgroup.controllers")


def read_meminfo(path: Path = Path("/proc/meminfo")) -> dict[str, int]:
    """``/proc/meminfo`` in KiB per field (empty when unreadable)."""
    out: dict[str, int] = {}
    try:
        text = path.read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0])
    return out


def memory_total_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    """The machine's memory in MiB (0 when ``/proc/meminfo`` cannot be read)."""
    return read_meminfo(meminfo).get("MemTotal", 0) // 1024


def fallback_address_space_mb(configured_mb: int, total_mb: int) -> int:
    """The address-space cap per process when no cgroup caps a turn's memory: half of what the
    device has beyond the service's share (a worker and its tool child may each reach it),
    never below the floor a Python worker needs, never above the configured cap."""
    if total_mb <= 0:
        return configured_mb
    share = (total_mb - SERVICE_SHARE_MB) // 2
    return min(configured_mb, max(FALLBACK_FLOOR_MB, share))


def address_space_mb(settings: Settings) -> int:
    """The ``RLIMIT_AS`` every worker, gate run and tool child gets under ``settings``."""
    configured = settings.limits.rlimit_as_mb
    if turn_memory_cap(settings.sandbox):
        return configured
    return fallback_address_space_mb(configured, memory_total_mb())


def with_memory_fallback(settings: Settings) -> Settings:
    """``settings`` with ``limits.rlimit_as_mb`` the cap in force (``address_space_mb``)."""
    cap = address_space_mb(settings)
    if cap == settings.limits.rlimit_as_mb:
        return settings
    return dataclasses.replace(
        settings, limits=dataclasses.replace(settings.limits, rlimit_as_mb=cap)
    )


def memory_cap_line(settings: Settings) -> tuple[bool, str]:
    """``describe``'s "memory cap" line: whether a cgroup caps each turn's memory, and what
    does where none does."""
    sandbox = settings.sandbox
    as_mb = address_space_mb(settings)
    if turn_memory_cap(sandbox):
        return True, (
            f"cgroup memory.max {sandbox.memory_max_mb} MB per turn, "
            f"{sandbox.turns_memory_max_mb} MB for all turns; RLIMIT_AS {as_mb} MB per process"
        )
    detail = f"memory: RLIMIT_AS only ({as_mb} MB per worker, gate run and tool child)"
    if not kernel_memory_controller():
        return False, f"{detail}; the kernel's memory cgroup controller is off: {CMDLINE_FIX}"
    return False, f"{detail}; no delegated cgroup (the systemd unit gives one)"
