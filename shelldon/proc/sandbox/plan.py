"""The plan: which layers this kernel and config give, what required mode demands, the lines doctor
shows.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import structlog

from shelldon.config import SandboxSettings, Settings
from shelldon.proc.sandbox.cgroup import cgroup_parent
from shelldon.proc.sandbox.landlock import landlock_abi
from shelldon.proc.sandbox.memory import memory_cap_line
from shelldon.proc.sandbox.pidns import pidns_available
from shelldon.proc.sandbox.policy import FS_LAYERS, SandboxError
from shelldon.proc.sandbox.seccomp import seccomp_available
from shelldon.proc.sandbox.userns import userns_available

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Plan:
    """What confinement a process gets: mode, seccomp on/off, the filesystem layer, and
    whether each worker and gate run gets a PID namespace of its own."""

    mode: str
    seccomp: bool
    fs: str
    pidns: bool = False


@functools.cache
def plan(sandbox: SandboxSettings) -> Plan:
    """The layers this machine offers under ``sandbox`` (``fs`` forces the filesystem layer)."""
    if sandbox.mode == "off":
        return Plan("off", False, "none")
    if sandbox.fs in FS_LAYERS:
        fs = sandbox.fs
    elif landlock_abi() > 0:
        fs = "landlock"
    elif userns_available():
        fs = "userns"
    else:
        fs = "none"
    pidns = sandbox.pidns == "auto" and pidns_available()
    return Plan(sandbox.mode, seccomp_available(), fs, pidns)


def check_required(settings: Settings) -> None:
    """Raise ``SandboxError`` when ``mode = required`` and seccomp or a filesystem layer is
    missing (call at service start); log the layers either way."""
    p = plan(settings.sandbox)
    for name, active, detail in describe(settings):
        log.info("sandbox_layer", layer=name, active=active, detail=detail)
    if p.mode == "off":
        log.warning("sandbox_off", hint="[sandbox] mode = off: the path jail alone guards files")
        return
    missing = []
    if not p.seccomp:
        missing.append("seccomp (install libseccomp2)")
    if p.fs == "none":
        missing.append(
            "a filesystem layer (a kernel with Landlock, or unprivileged user namespaces: "
            "sysctl kernel.unprivileged_userns_clone=1)"
        )
    if not missing:
        return
    if p.mode == "required":
        raise SandboxError(
            "[sandbox] mode = required, but this machine lacks "
            + " and ".join(missing)
            + "; fix that or set [sandbox] mode = best-effort"
        )
    log.warning("sandbox_degraded", missing=", ".join(missing))


def required_layer(settings: Settings, name: str) -> bool:
    """Is ``describe``'s line ``name`` one that ``mode = required`` refuses to start without?"""
    return settings.sandbox.mode == "required" and name in ("seccomp", "filesystem layer")


def describe(settings: Settings) -> list[tuple[str, bool, str]]:
    """One (name, active, detail) line per layer, for ``shelldon doctor`` and the start log."""
    sandbox = settings.sandbox
    p = plan(sandbox)
    on = p.mode != "off"
    abi = landlock_abi()
    parent = cgroup_parent(sandbox) if on else None
    capped, memory = memory_cap_line(settings)
    detail = _cgroup_detail(parent, p)
    if parent is not None and not capped:
        detail += " (pids and cgroup.kill only: no memory controller)"
    return [
        ("mode", on, f"{p.mode}" + (" (nothing is applied)" if not on else "")),
        (
            "seccomp",
            on and p.seccomp,
            "libseccomp found; ptrace, bpf, keyctl, mount, unshare, modules denied"
            if p.seccomp
            else "unavailable: libseccomp.so.2 missing or no kernel seccomp",
        ),
        (
            "landlock",
            on and p.fs == "landlock",
            f"kernel ABI {abi}" if abi else "kernel has no Landlock (stock Raspberry Pi OS)",
        ),
        (
            "user+mount namespace",
            on and p.fs == "userns",
            (
                ("in use" if p.fs == "userns" else "available, the fallback when Landlock is not")
                if userns_available()
                else "unavailable (unprivileged user namespaces are disabled)"
            ),
        ),
        (
            "filesystem layer",
            on and p.fs != "none",
            p.fs if p.fs != "none" else "none: only the path jail guards files",
        ),
        (
            "pid namespace",
            on and p.pidns,
            "each worker and gate run: it can signal, renice or prlimit no process outside its "
            "turn, and what it starts dies with it"
            if p.pidns
            else (
                "off ([sandbox] pidns)"
                if sandbox.pidns == "off"
                else "unavailable (unprivileged user namespaces, or RestrictNamespaces= lacks pid)"
            )
            + ": a tool may signal the service's processes"
            + (" (Landlock scopes signals)" if p.fs == "landlock" and abi >= 6 else ""),
        ),
        ("cgroup per turn", parent is not None, detail),
        ("memory cap", capped, memory),
    ]


def _cgroup_detail(parent: object, p: Plan) -> str:
    if parent is not None:
        return str(parent)
    weaker = "no delegated cgroup: a turn's memory is bounded only by RLIMIT_AS, its processes "
    weaker += "only by the unit's TasksMax"
    if p.pidns:
        return weaker + "; stragglers still end with the turn (its PID namespace)"
    return weaker + "; a tool's setsid daemon may outlive its turn (run_shell sweeps its own)"
