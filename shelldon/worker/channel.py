"""Frames on the worker ⇄ TurnActor socketpair: a 4-byte big-endian length, then a contract blob.

The length is checked against ``MAX_BLOB_BYTES`` before a single body byte is read, so a
garbage prefix costs nothing; the body is ``shelldon.contracts.encode(obj)``. Every failure
(EOF, oversize length, a blob that is not a contract, a peer that went quiet past the deadline)
is a ``FrameError``: the caller ends the turn instead of hanging or guessing.
"""

from __future__ import annotations

import select
import struct
import time
from typing import Any

from shelldon.contracts import MAX_BLOB_BYTES, ContractError, decode, encode

HEADER = struct.Struct(">I")
"""The length prefix: an unsigned 32-bit big-endian count of body bytes."""

_CHUNK = 1 << 16


class FrameError(Exception):
    """A frame could not be sent or received: EOF, oversize length, a bad blob, or timeout."""


class FrameTimeout(FrameError):
    """The deadline passed while waiting to send or receive a frame."""


def pack_frame(obj: Any) -> bytes:
    """The bytes of one frame carrying contract ``obj``; raises ``FrameError`` if it cannot."""
    try:
        body = encode(obj)
    except ContractError as exc:
        raise FrameError(f"cannot frame {type(obj).__name__}: {exc}") from exc
    return HEADER.pack(len(body)) + body


def _check_length(length: int) -> None:
    if length > MAX_BLOB_BYTES:
        raise FrameError(
            f"frame length {length} is over the {MAX_BLOB_BYTES}-byte cap; the peer is "
            "broken or hostile"
        )


def _decode_body(body: bytes) -> Any:
    try:
        return decode(body)
    except ContractError as exc:
        raise FrameError(f"bad frame: {exc}") from exc


def _wait(fd: int, events: int, deadline: float, doing: str) -> None:
    """Block until ``fd`` is ready for ``events`` or raise ``FrameError`` at the deadline."""
    poller = select.poll()
    poller.register(fd, events)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise FrameTimeout(f"timed out {doing}: the turn's deadline passed")
        # poll's timeout is in milliseconds; round up so we never spin on a 0 ms wait.
        if poller.poll(max(1, int(left * 1000) + 1)):
            return


def send_frame(sock: Any, obj: Any, deadline: float) -> None:
    """Send contract ``obj`` as one frame, on a blocking or non-blocking socket; ``deadline``
    (absolute ``time.monotonic()``) bounds the wait for a full socket buffer."""
    send_packed(sock, pack_frame(obj), deadline)


def send_packed(sock: Any, frame: bytes, deadline: float) -> None:
    """Send bytes made by ``pack_frame`` (for a caller that had to check the size first)."""
    data = memoryview(frame)
    while data:
        try:
            sent = sock.send(data[:_CHUNK])
        except (BlockingIOError, InterruptedError):
            _wait(sock.fileno(), select.POLLOUT, deadline, "sending a frame")
            continue
        except OSError as exc:
            raise FrameError(f"cannot send a frame: {exc}") from exc
        data = data[sent:]


def _recv_exact(sock: Any, count: int, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < count:
        _wait(sock.fileno(), select.POLLIN, deadline, "waiting for a frame")
        try:
            chunk = sock.recv(min(count - len(buf), _CHUNK))
        except (BlockingIOError, InterruptedError):
            continue
        except OSError as exc:
            raise FrameError(f"cannot receive a frame: {exc}") from exc
        if not chunk:
            where = "between frames" if not buf and count == HEADER.size else "inside a frame"
            raise FrameError(f"the peer closed the channel ({where})")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: Any, deadline: float) -> Any:
    """Receive one frame and return its contract; raises ``FrameError`` on any failure."""
    (length,) = HEADER.unpack(_recv_exact(sock, HEADER.size, deadline))
    _check_length(length)
    return _decode_body(_recv_exact(sock, length, deadline))


class FrameReader:
    """Incremental frame parser for a non-blocking reader: feed bytes, get whole contracts.
    After a ``FrameError`` the stream is out of sync for good; the owner must end the turn."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Bytes held that do not yet make a whole frame (non-zero at EOF means a cut frame)."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Any]:
        """Add ``data`` and return every contract completed by it, in order."""
        self._buf += data
        out: list[Any] = []
        while len(self._buf) >= HEADER.size:
            (length,) = HEADER.unpack_from(self._buf)
            _check_length(length)
            end = HEADER.size + length
            if len(self._buf) < end:
                break
            body = bytes(self._buf[HEADER.size : end])
            del self._buf[:end]
            out.append(_decode_body(body))
        return out
