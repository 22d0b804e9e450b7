"""What the sandbox denies and allows: syscall and socket tables, the paths every child may read,
the error type.
"""

from __future__ import annotations

import socket

FS_LAYERS = ("landlock", "userns", "none")

DENIED_SYSCALLS = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "mount",
    "umount2",
    "pivot_root",
    "unshare",
    "setns",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "perf_event_open",
    "io_uring_setup",
    "userfaultfd",
    "open_by_handle_at",
    "fsopen",
    "fsmount",
    "move_mount",
    "open_tree",
)
"""Syscalls no worker, tool or gate run needs; they fail with EPERM."""

_NAMESPACE_SYSCALLS = frozenset({"mount", "umount2", "pivot_root", "unshare", "setns"})

DENIED_SOCKET_FAMILIES = (socket.AF_INET, socket.AF_INET6, socket.AF_PACKET, socket.AF_NETLINK)

_CLONE_NS_FLAGS = (
    0x10000000,
    0x20000000,
    0x40000000,
    0x00020000,
    0x04000000,
    0x08000000,
    0x02000000,
)
# CLONE_NEWUSER, NEWPID, NEWNET, NEWNS, NEWUTS, NEWIPC, NEWCGROUP: clone() that makes a namespace

_READ_ONLY_ROOTS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/hosts",
    "/etc/resolv.conf",
    "/etc/nsswitch.conf",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/pki",
    "/etc/python3",
    "/etc/python3.11",
)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")


class SandboxError(RuntimeError):
    """A layer that ``mode = required`` demands could not be applied; the text says which."""
