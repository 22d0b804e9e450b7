"""A hand-built seccomp program that refuses one syscall, to test what runs where it is refused.

Container runtimes and older seccomp profiles answer syscalls they do not know (openat2 among
them) with ENOSYS or EPERM; loading this in a forked child reproduces either on any kernel.
"""

from __future__ import annotations

import struct

_LD_W_ABS, _JEQ_K, _RET_K = 0x20, 0x15, 0x06
_RET_ERRNO, _RET_ALLOW = 0x00050000, 0x7FFF0000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def refuse_syscall(number: int, errno_code: int) -> bytes:
    """A raw ``sock_filter`` program: syscall ``number`` fails with ``errno_code``; the rest run."""
    return b"".join(
        (
            _insn(_LD_W_ABS, 0, 0, 0),  # seccomp_data.nr
            _insn(_JEQ_K, 0, 1, number),
            _insn(_RET_K, 0, 0, _RET_ERRNO | errno_code),
            _insn(_RET_K, 0, 0, _RET_ALLOW),
        )
    )
