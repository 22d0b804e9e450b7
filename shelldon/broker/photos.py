"""The owner's photos in the broker's memory, between the transport that fetched them and the
provider call that shows them to the model.

The transport hands the bytes over once (``put``); a worker's Job names a photo only by its
``key``, and ``attach`` lends the bytes to the first turn whose Job names it, for each of that
turn's model calls; ``close`` drops them when that turn ends, so a later turn's requests carry
the placeholder alone. The bytes never reach sqlite, the workspace or a worker, and a photo
that is gone (a restart, a parked turn resumed later, more photos than the shelf holds) is
sent as its placeholder with a note saying so.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from shelldon.contracts import Message, Photo

GONE_NOTE = (
    " (I no longer have this image in memory, only this description; ask the owner to send "
    "it again if you need to see it.)"
)


@dataclass(slots=True)
class _Held:
    data: bytes
    turn_id: str = ""


class PhotoShelf:
    """Photos by key, at most ``max_bytes`` of them together (the oldest go first)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._held: OrderedDict[str, _Held] = OrderedDict()

    @property
    def held_bytes(self) -> int:
        """How many bytes of photos the shelf holds now."""
        return sum(len(h.data) for h in self._held.values())

    def put(self, photo: Photo, data: bytes) -> None:
        """Keep ``data`` under ``photo.key`` until its turn closes (or room is needed)."""
        self._held[photo.key] = _Held(data)
        while len(self._held) > 1 and self.held_bytes > self.max_bytes:
            self._held.popitem(last=False)

    def attach(self, turn_id: str, messages: Sequence[Message]) -> tuple[Message, ...]:
        """``messages`` with each photo's bytes filled in for ``turn_id``, or its note that it
        is gone. Whatever bytes a worker put in a photo are never the ones sent."""
        out: list[Message] = []
        for msg in messages:
            photo = msg.photo
            if photo is None:
                out.append(msg)
                continue
            held = self._held.get(photo.key)
            if held is not None and held.turn_id in ("", turn_id):
                held.turn_id = turn_id
                out.append(
                    dataclasses.replace(msg, photo=dataclasses.replace(photo, data=held.data))
                )
            else:
                out.append(dataclasses.replace(msg, content=msg.content + GONE_NOTE, photo=None))
        return tuple(out)

    def close(self, turn_id: str) -> None:
        """Turn ``turn_id`` is over: drop the photos it was lent."""
        for key in [k for k, h in self._held.items() if h.turn_id == turn_id]:
            del self._held[key]
