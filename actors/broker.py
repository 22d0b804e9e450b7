"""BrokerActor: holds the provider and its credentials; answers each Job with a Completion or
JobFailed. Provider calls run on an asyncio loop in a thread so this mailbox never blocks."""

from __future__ import annotations

import dataclasses
import sqlite3
import time

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, WatchMessage

from actors.bridge import AsyncBridge
from actors.messages import JobAnswer, PhotoBytes, TurnClosed, Wire
from actors.wired import WiredActor
from shelldon.broker import job_failed, load_failover
from shelldon.broker.fallback import Failover
from shelldon.broker.photos import PhotoShelf, return_big_buffers
from shelldon.config import PhotosSettings
from shelldon.contracts import Job, JobFailed, Usage
from shelldon.secrets import SecretMissingError

log = structlog.get_logger(__name__)


class BrokerActor(WiredActor):
    """The only actor (with the transport) that holds a credential. Executes nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.failover: Failover | None = None  # the main provider and its fallback
        self.bridge: AsyncBridge | None = None
        self.load_kind = "unconfigured"
        self.load_error = ""
        # Two photos at the cap: one in its turn, one queued behind it.
        self.photos = PhotoShelf(2 * PhotosSettings().max_bytes)

    def wired(self, msg: Wire, *, first: bool) -> None:
        if not first:
            return
        settings = msg.boot.settings
        self.photos.max_bytes = 2 * settings.photos.max_bytes
        if settings.photos.enabled(settings.brain):
            return_big_buffers()  # process-wide: the transport's download is in this process
        self.bridge = AsyncBridge("broker")
        self.watch(self.bridge.fileno())
        try:
            self.failover = load_failover(settings)
        except SecretMissingError as exc:
            self.load_kind, self.load_error = "no_key", str(exc)
            log.error("provider_not_loaded", error=self.load_error)
        except Exception as exc:  # a bad script: report it per Job, don't crash
            self.load_kind, self.load_error = "unconfigured", f"{type(exc).__name__}: {exc}"
            log.error("provider_not_loaded", error=self.load_error)

    def receiveMsg_Job(self, msg: Job, sender: ActorAddress) -> None:
        if self.failover is None or self.bridge is None:
            # Never "auth": nothing was refused, nothing was sent.
            failed = JobFailed(msg.turn_id, self.load_kind, self.load_error or "no provider")
            self.send(sender, JobAnswer(msg.turn_id, failed))
            return
        # The photo's bytes join the request here, at the provider's door, and nowhere else.
        job = dataclasses.replace(msg, messages=self.photos.attach(msg.turn_id, msg.messages))
        self.bridge.submit(self.failover.answer(job), (sender, msg.turn_id))

    def receiveMsg_PhotoBytes(self, msg: PhotoBytes, sender: ActorAddress) -> None:
        self.photos.put(msg.photo, msg.data)

    def receiveMsg_TurnClosed(self, msg: TurnClosed, sender: ActorAddress) -> None:
        self.photos.close(msg.turn_id)

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        if self.bridge is None or self.bridge.fileno() not in msg.ready:
            return
        for (reply_to, turn_id), answered, error in self.bridge.drain():
            if error is None:
                completion, usage = answered.completion, answered.completion.usage
                log.info(
                    "model_call",
                    turn_id=turn_id,
                    provider=answered.provider,
                    input_tokens=usage.input_tokens,
                    output_tokens=usage.output_tokens,
                    tool_calls=len(completion.tool_calls),
                )
                self.send(reply_to, JobAnswer(turn_id, completion, answered.note))
                self._count(turn_id, answered.provider, answered.model, usage)
                continue
            self.send(reply_to, JobAnswer(turn_id, job_failed(turn_id, error)))

    def _count(self, turn_id: str, provider: str, model: str, usage: Usage) -> None:
        """Persist one completed call for /usage, under the provider that answered it; the
        answer has gone out already, and a store that cannot take the row costs a line in the
        log, never the turn."""
        if self.store is None:
            return
        try:
            self.store.usage.record(
                provider, model, usage.input_tokens, usage.output_tokens, time.time(), turn_id
            )
        except sqlite3.Error as exc:
            log.error("model_call_not_counted", turn_id=turn_id, error=str(exc))

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        if self.bridge is not None:
            if self.failover is not None:
                try:
                    self.bridge.submit(self.failover.aclose(), None).result(2)
                except Exception:
                    log.exception("provider_close_failed")
            self.bridge.close()
            self.bridge = None
