"""Messages the probe actors understand: a data-only module, trusted for unpickling in conftest."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Ping:
    """Answered with a ``Pong`` carrying the actor's pid."""

    text: str
    turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class Pong:
    """The answer to ``Ping``."""

    text: str
    pid: int


@dataclass(frozen=True, slots=True)
class SpawnChildren:
    """Create ``count`` child probes; answered with ``Spawned``."""

    count: int


@dataclass(frozen=True, slots=True)
class Spawned:
    """The addresses of the children just created."""

    addresses: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Explode:
    """Counted, then the handler raises."""

    turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class CountCalls:
    """Answered with ``Calls``: how many times ``Explode``'s handler ran."""


@dataclass(frozen=True, slots=True)
class Calls:
    """How many times the exploding handler ran."""

    count: int


@dataclass(frozen=True, slots=True)
class Block:
    """Sleep inside the handler: an actor stuck in ``receiveMessage``."""

    seconds: float


@dataclass(frozen=True, slots=True)
class WatchPipe:
    """Open a pipe, watch its read end, write ``data`` and close: answered with ``Watched``."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Watched:
    """What the actor read from the watched pipe before EOF."""

    data: bytes


@dataclass(frozen=True, slots=True)
class Stranger:
    """A trusted class that no probe declares: the door must drop it."""

    text: str
