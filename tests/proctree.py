"""The processes of an actor system and the sockets they listen on, read from ``/proc``.

Used to stop a system for sure (find what is left, kill it) and to check what it exposes.
Linux only; every function returns what it could read and skips processes that vanish midway.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")
_TCP_LISTEN = "0A"


@dataclass(frozen=True, slots=True)
class ListeningSocket:
    """A TCP socket in LISTEN state held by a process: who, which family, where."""

    pid: int
    family: str  # "tcp" or "tcp6"
    address: str
    port: int


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name sits in parentheses and may contain spaces: split after the last ')'.
    return raw[raw.rfind(")") + 2 :].split()


def is_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _all_pids() -> list[int]:
    return [int(p.name) for p in _PROC.iterdir() if p.name.isdigit()]


def session_members(session_id: int) -> set[int]:
    """Live processes whose session id is ``session_id``."""
    found = set()
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] not in ("Z", "X") and int(fields[3]) == session_id:
            found.add(pid)
    return found


def with_descendants(roots: Iterable[int]) -> set[int]:
    """``roots`` plus every live process descending from one of them."""
    children: dict[int, list[int]] = {}
    for pid in _all_pids():
        fields = _stat_fields(pid)
        if fields is not None and fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(pid)
    found: set[int] = set()
    todo = [pid for pid in roots if is_alive(pid)]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    fd_dir = _PROC / str(pid) / "fd"
    try:
        entries = list(fd_dir.iterdir())
    except OSError:
        return inodes
    for entry in entries:
        try:
            target = os.readlink(entry)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _decode_address(hex_address: str, family: str) -> str:
    raw = bytes.fromhex(hex_address)
    if family == "tcp":
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    # /proc/net/tcp6 prints the address as four host-order 32-bit words.
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def _listening_by_inode() -> dict[int, tuple[str, str, int]]:
    found = {}
    for family in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / family).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] != _TCP_LISTEN:
                continue
            hex_address, hex_port = cols[1].split(":")
            found[int(cols[9])] = (family, _decode_address(hex_address, family), int(hex_port, 16))
    return found


def listening_sockets(pids: Iterable[int]) -> list[ListeningSocket]:
    """Every TCP/TCP6 socket in LISTEN state that one of ``pids`` holds open."""
    table = _listening_by_inode()
    found = []
    for pid in sorted(set(pids)):
        for inode in _socket_inodes(pid):
            if inode in table:
                family, address, port = table[inode]
                found.append(ListeningSocket(pid, family, address, port))
    return found


def listeners_on_port(port: int) -> set[int]:
    """Pids holding a socket that listens on TCP ``port`` (any address)."""
    inodes = {ino for ino, (_f, _a, p) in _listening_by_inode().items() if p == port}
    return {pid for pid in _all_pids() if _socket_inodes(pid) & inodes}


def pss_kib(pids: Iterable[int]) -> int:
    """Sum of ``Pss`` over ``pids`` from ``/proc/PID/smaps_rollup``, in KiB (RSS double-counts)."""
    total = 0
    for pid in pids:
        try:
            text = (_PROC / str(pid) / "smaps_rollup").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                break
    return total
