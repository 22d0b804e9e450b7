"""Kernel confinement for the worker and the gate, each layer used where the kernel offers it:

- **seccomp-bpf** (libseccomp through ctypes): dangerous syscalls (ptrace, bpf, keyctl, mount,
  unshare, kernel modules, reboot, ...) fail with EPERM; for FREE-only turns and the gate also
  ``socket()`` of the IP, packet and netlink families (AF_UNIX stays).
- **filesystem**, the strongest available: Landlock (read-only on what Python needs, read-write
  on the workspace or the gate's staging dir, nothing else), else an unprivileged user + mount
  namespace that shows only those paths, else nothing (the path jail alone; warned once).
- **a PID namespace** per worker and gate run (``pidns``).
- **a cgroup per turn** under a delegated cgroup: ``memory.max``/``pids.max`` where the
  controllers exist and ``cgroup.kill`` at the end, which also ends ``setsid`` stragglers.

``[sandbox] mode``: ``required`` refuses to start without seccomp and a filesystem layer
(``check_required``), ``best-effort`` uses what there is, ``off`` applies nothing. Everything
is prepared in the parent (``confinement``); the child only makes syscalls (``apply``). This
package's names are the interface; its modules import each other, never the package.
"""

from __future__ import annotations

from shelldon.proc.sandbox.apply import (
    confine_call,
    confine_worker,
    filesystem_confined,
    gate_preexec,
    isolate_pids,
)
from shelldon.proc.sandbox.cgroup import (
    TurnCgroup,
    cgroup_parent,
    delegated_cgroup,
    open_turn_cgroup,
    prepare_delegated_cgroup,
)
from shelldon.proc.sandbox.confinement import (
    Confinement,
    prepare_call,
    prepare_worker,
    with_private_dir,
)
from shelldon.proc.sandbox.dumpable import drop_capabilities, dumpable, forbid_dumps
from shelldon.proc.sandbox.landlock import Rulesets, landlock_abi
from shelldon.proc.sandbox.memory import CMDLINE_FIX, kernel_memory_controller, with_memory_fallback
from shelldon.proc.sandbox.paths import allowed_paths
from shelldon.proc.sandbox.pidns import pidns_available
from shelldon.proc.sandbox.plan import check_required, describe, plan, required_layer
from shelldon.proc.sandbox.policy import SandboxError
from shelldon.proc.sandbox.seccomp import build_filter, load_filter
from shelldon.proc.sandbox.userns import userns_available

__all__ = [
    "confine_call",
    "confine_worker",
    "filesystem_confined",
    "gate_preexec",
    "isolate_pids",
    "TurnCgroup",
    "cgroup_parent",
    "delegated_cgroup",
    "open_turn_cgroup",
    "prepare_delegated_cgroup",
    "drop_capabilities",
    "dumpable",
    "forbid_dumps",
    "Rulesets",
    "landlock_abi",
    "CMDLINE_FIX",
    "kernel_memory_controller",
    "with_memory_fallback",
    "allowed_paths",
    "Confinement",
    "prepare_call",
    "with_private_dir",
    "prepare_worker",
    "check_required",
    "describe",
    "plan",
    "required_layer",
    "SandboxError",
    "build_filter",
    "load_filter",
    "userns_available",
    "pidns_available",
]
