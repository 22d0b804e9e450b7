"""The symlink-swap race the jail must survive: a forked process that keeps exchanging a
workspace directory with a symlink to somewhere outside, as fast as it can.

The exchange is atomic (renameat2 ``RENAME_EXCHANGE``, as CVE-2018-15664's proof of concept
did): the name is always there, a directory or a symlink, never missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import signal
import struct
from collections.abc import Iterator
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(one: Path, other: Path) -> None:
    """Swap two names atomically."""
    rc = _libc.renameat2(
        _AT_FDCWD, os.fsencode(one), _AT_FDCWD, os.fsencode(other), _RENAME_EXCHANGE
    )
    if rc != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(one))


class Swaps:
    """How many swaps the racing process has made so far (shared memory, read any time)."""

    def __init__(self, shared: mmap.mmap) -> None:
        self._shared = shared

    @property
    def count(self) -> int:
        return int(struct.unpack_from("=Q", self._shared)[0])


@contextlib.contextmanager
def swapping(directory: Path, outside: Path) -> Iterator[Swaps]:
    """While the block runs, ``directory`` flips between itself and a symlink to ``outside``;
    afterwards it is the directory again."""
    shared = mmap.mmap(-1, 8)
    link = directory.with_name(directory.name + ".link")
    link.symlink_to(outside, target_is_directory=True)
    pid = os.fork()
    if pid == 0:
        try:
            count = 0
            while True:
                exchange(directory, link)
                exchange(directory, link)
                count += 1
                struct.pack_into("=Q", shared, 0, count)
        finally:
            os._exit(0)
    try:
        yield Swaps(shared)
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if directory.is_symlink():
            exchange(directory, link)
        link.unlink()
        shared.close()
