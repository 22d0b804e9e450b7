"""The owner's photos in the broker's memory, between the transport that fetched them and the
provider call that shows them to the model.

The transport hands the bytes over once (``put``); a worker's Job names a photo only by its
``key``, and ``attach`` lends the image to the first turn whose Job names it, for each of that
turn's model calls; ``close`` drops it when that turn ends, so a later turn's requests carry
the placeholder alone. The image is base64-encoded once, at its turn's first call, and the raw
bytes dropped then: each call of the turn reuses the text instead of making it again (a 5 MB
image is 6.7 MB of base64; three calls a turn made three of them, and a Pi's time). The bytes
never reach sqlite, the workspace or a worker, and a photo that is gone (a restart, a parked
turn resumed later, more photos than the shelf holds) is sent as its placeholder with a note
saying so.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from shelldon.contracts import Message, Photo

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
BIG_BUFFER = 128 * 1024


def return_big_buffers() -> bool:
    """Have glibc give every buffer of 128 KB or more its own mapping, returned to the system
    when freed. By default glibc raises that threshold to the size of the first such buffer
    freed (up to 32 MB), after which a photo's copies (download, base64, the JSON body) come
    from arenas that keep them: measured with a 5 MB image, the Anthropic service peaked at
    185 MB and stayed 8 MB above idle; with this, 158 MB and back to idle
    (``tests/bench/bench_photo.py``). False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, BIG_BUFFER))


GONE_NOTE = (
    " (I no longer have this image in memory, only this description; ask the owner to send "
    "it again if you need to see it.)"
)

BLIND_NOTE = " (The model answering now cannot see images: only this description reached it.)"


def without_photos(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` with each photo left as its placeholder text and ``BLIND_NOTE``, for a
    model that takes no images (a fallback without vision)."""
    return tuple(
        dataclasses.replace(m, content=m.content + BLIND_NOTE, photo=None) if m.photo else m
        for m in messages
    )


@dataclass(slots=True)
class _Held:
    data: bytes  # the raw bytes until the first call; then b"" and ``text`` holds them
    turn_id: str = ""
    text: str = ""

    @property
    def size(self) -> int:
        return len(self.data) + len(self.text)

    def as_base64(self) -> str:
        if not self.text:
            self.text, self.data = base64.b64encode(self.data).decode("ascii"), b""
        return self.text


class PhotoShelf:
    """Photos by key, at most ``max_bytes`` of them together (the oldest go first)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[str, _Held] = OrderedDict()

    @property
    def held_bytes(self) -> int:
        """How many bytes of photos the shelf holds now."""
        return sum(h.size for h in self._held.values())

    def put(self, photo: Photo, data: bytes) -> None:
        """Keep ``data`` under ``photo.key`` until its turn closes (or room is needed)."""
        self._held[photo.key] = _Held(data)
        while len(self._held) > 1 and self.held_bytes > self.max_bytes:
            self._held.popitem(last=False)

    def attach(self, turn_id: str, messages: Sequence[Message]) -> tuple[Message, ...]:
        """``messages`` with each photo filled in (base64) for ``turn_id``, or its note that it
        is gone. Whatever a worker put in a photo is never what is sent."""
        out: list[Message] = []
        for msg in messages:
            photo = msg.photo
            if photo is None:
                out.append(msg)
                continue
            held = self._held.get(photo.key)
            if held is not None and held.turn_id in ("", turn_id):
                held.turn_id = turn_id
                text = held.as_base64()
                out.append(dataclasses.replace(msg, photo=dataclasses.replace(photo, base64=text)))
            else:
                out.append(dataclasses.replace(msg, content=msg.content + GONE_NOTE, photo=None))
        return tuple(out)

    def close(self, turn_id: str) -> None:
        """Turn ``turn_id`` is over: drop the photos it was lent."""
        for key in [k for k, h in self._held.items() if h.turn_id == turn_id]:
            del self._held[key]
