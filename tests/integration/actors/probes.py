"""The actors under test: a ``ContractActor`` probe, and a plain Thespian actor for comparison."""

from __future__ import annotations

import logging
import os
import time
from datetime import timedelta

import structlog
from thespian.actors import Actor, ActorAddress, WakeupMessage, WatchMessage

from actors.base import ContractActor
from tests.integration.actors.messages import (
    Block,
    Calls,
    CountCalls,
    Explode,
    Ping,
    Pong,
    SpawnChildren,
    Spawned,
    Watched,
    WatchPipe,
)

log = structlog.get_logger(__name__)


class ProbeActor(ContractActor):
    """Answers pings with its pid, spawns children, explodes on demand, watches a pipe."""

    def __init__(self) -> None:
        super().__init__()
        self.explosions = 0
        self.children: list[ActorAddress] = []
        self.pipe_reader: tuple[int, ActorAddress, bytearray] | None = None

    def receiveMsg_Ping(self, msg: Ping, sender: ActorAddress) -> None:
        log.info("pinged", text=msg.text)
        logging.getLogger("probe.stdlib").warning("stdlib record from %s", "probe")
        self.send(sender, Pong(msg.text, os.getpid()))

    def receiveMsg_SpawnChildren(self, msg: SpawnChildren, sender: ActorAddress) -> None:
        made = [self.createActor(ProbeActor) for _ in range(msg.count)]
        self.children.extend(made)
        self.send(sender, Spawned(tuple(made)))

    def receiveMsg_Explode(self, msg: Explode, sender: ActorAddress) -> None:
        self.explosions += 1
        raise RuntimeError("probe exploded on purpose")

    def receiveMsg_CountCalls(self, msg: CountCalls, sender: ActorAddress) -> None:
        self.send(sender, Calls(self.explosions))

    def receiveMsg_Block(self, msg: Block, sender: ActorAddress) -> None:
        time.sleep(msg.seconds)

    def receiveMsg_WatchPipe(self, msg: WatchPipe, sender: ActorAddress) -> None:
        reader, writer = os.pipe()
        os.write(writer, msg.data)
        os.close(writer)
        self.pipe_reader = (reader, sender, bytearray())
        self.watch(reader)

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        if self.pipe_reader is None:
            return
        reader, asker, got = self.pipe_reader
        if reader not in msg.ready:
            return
        chunk = os.read(reader, 4096)
        if chunk:
            got.extend(chunk)
            return
        self.unwatch(reader)
        os.close(reader)
        self.pipe_reader = None
        self.send(asker, Watched(bytes(got)))

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        self.send(msg.payload, Pong("woke", os.getpid()))

    def receiveMsg_str(self, msg: str, sender: ActorAddress) -> None:
        # A plain string asking for a wake-up: shows builtins can be declared too.
        if msg == "wake me":
            self.wakeupAfter(timedelta(milliseconds=20), payload=sender)


class PlainActor(Actor):  # type: ignore[misc]
    """A bare Thespian actor that raises: shows Thespian's own redelivery and warnings."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    def receiveMessage(self, msg: object, sender: ActorAddress) -> None:
        if isinstance(msg, Explode):
            self.runs += 1
            raise RuntimeError("plain actor exploded")
        if isinstance(msg, CountCalls):
            self.send(sender, Calls(self.runs))
