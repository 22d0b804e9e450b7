"""A child's captured output: a pipe read without blocking into a capped buffer; the child's
side, ``write_all``."""

from __future__ import annotations

import contextlib
import errno
import os
from collections import deque

_READ_SIZE = 64 * 1024


class Output:
    """A child's output pipe, read without blocking into a buffer that holds at most ``cap``
    bytes: the head only, or (``tail=True``) the head and the tail, what was dropped counted."""

    def __init__(self, fd: int, cap: int, *, tail: bool = False) -> None:
        os.set_blocking(fd, False)
        self.fd = fd
        self.half = max(cap // 2, 256) if tail else cap
        self.keep_tail = tail
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self._dropped = 0
        self.eof = False

    @property
    def dropped(self) -> int:
        """Bytes read but not kept."""
        return self._dropped + max(self.tail_len - self.half, 0)

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def drain(self, max_chunks: int = 64) -> None:
        """Read what the pipe holds now; bounded, so a child that never stops writing (or one
        that escaped and keeps the pipe open) cannot hold its owner in this loop."""
        for _ in range(max_chunks):
            if self.eof:
                return
            try:
                chunk = os.read(self.fd, _READ_SIZE)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                chunk = b""
            if not chunk:
                self.close()
                return
            self.add(chunk)

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        if not self.keep_tail:
            self._dropped += len(chunk)
            return
        self.tail.append(chunk)
        self.tail_len += len(chunk)
        while self.tail_len - len(self.tail[0]) >= self.half:
            self._dropped += len(self.tail[0])
            self.tail_len -= len(self.tail.popleft())

    def data(self) -> bytes:
        """What was kept: the head, then the last bytes of the tail."""
        return bytes(self.head) + b"".join(self.tail)[-self.half :]

    def text(self) -> str:
        """What was kept as text, with a line where bytes were dropped."""
        head = self.head.decode("utf-8", "replace")
        rest = b"".join(self.tail)[-self.half :].decode("utf-8", "replace")
        if self.dropped:
            return f"{head}\n…[{self.dropped} bytes of output dropped]…\n{rest}"
        return head + rest

    def close(self) -> None:
        if not self.eof:
            self.eof = True
            with contextlib.suppress(OSError):
                os.close(self.fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to the blocking descriptor ``fd`` (a child's answer)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
