"""The fallback provider: once the main provider fails a turn in a way another provider can
mend, that turn's remaining calls go to ``[brain.fallback]``, within the same deadline.

Every ``ProviderError.kind`` (after the main's own retries) switches but ``bad_request``: the
request itself (400, 404 model, 413), which another model would be asked the same way. So a
main that cannot answer now (unreachable, timeout, server, overloaded, rate_limited), is out
of credit (quota), answers garbage (malformed) or refused its key (auth: revoked, expired; the
owner reads why on every reply until it is fixed) hands the turn over.

A refusal is an answer (a ``Completion``), never an error, so it is never asked elsewhere.
The switch lasts for one worker run of a turn (its id and deadline): its later calls skip the
main and its retries; the next turn tries the main again. The fallback is built at its first
use, so an idle service never imports its SDK.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from shelldon.broker.photos import without_photos
from shelldon.broker.provider import KINDS, MIN_ATTEMPT_S, Provider, ProviderError
from shelldon.contracts import Completion, Job

log = structlog.get_logger(__name__)

SWITCH_KINDS = KINDS - {"bad_request"}
"""The ``ProviderError`` kinds of the main provider that send a turn to the fallback."""

WHY = {
    "unreachable": "could not be reached",
    "timeout": "did not answer in time",
    "server": "had a server error",
    "overloaded": "was overloaded",
    "rate_limited": "was rate-limiting me",
    "quota": "is out of credit or quota",
    "auth": "refused its API key (`shelldon doctor` checks it)",
    "malformed": "answered with garbage",
}
"""How the owner's note says why the main provider was left."""


def fallback_note(fallback: tuple[str, str], main: str, kind: str) -> str:
    """The one line the owner reads under a reply the fallback answered."""
    provider, model = fallback
    return f"↪ Answered by the fallback, {provider} {model}: {main} {WHY.get(kind, kind)}."


@dataclass(frozen=True, slots=True)
class Answered:
    """A completion and who gave it (what /usage counts it under); ``note`` is set when the
    fallback answered."""

    completion: Completion
    provider: str
    model: str
    note: str = ""


class Failover:
    """The main provider, and the fallback for the rest of a turn the main failed.

    ``brain`` and ``fallback_brain`` are ``(provider, model)`` as configured; ``make_fallback``
    builds the fallback at its first use (None: no fallback); ``fallback_sees``: whether its
    model takes images (else a photo reaches it as its placeholder). Calls of one turn come one
    at a time (the worker waits for each answer), so the switch needs no lock."""

    def __init__(
        self,
        main: Provider,
        brain: tuple[str, str],
        make_fallback: Callable[[], Provider] | None = None,
        fallback_brain: tuple[str, str] = ("", ""),
        *,
        fallback_sees: bool = False,
    ) -> None:
        self.main = main
        self.brain = brain
        self.make_fallback = make_fallback
        self.fallback_brain = fallback_brain
        self.fallback: Provider | None = None
        self.fallback_sees = fallback_sees
        self.switched: tuple[tuple[str, float], str] | None = None  # (turn run, why), the latest

    async def answer(self, job: Job) -> Answered:
        """The completion for ``job``, from the main provider or, once the main failed this
        turn's run in a way that switches, from the fallback; raises ``ProviderError``."""
        run = (job.turn_id, job.deadline)
        if self.switched is not None and self.switched[0] == run:
            return await self._ask_fallback(job, self.switched[1])
        try:
            completion = await self.main.complete_with_tools(
                job.messages, job.tools, deadline=job.deadline
            )
        except ProviderError as err:
            if self.make_fallback is None or err.kind not in SWITCH_KINDS:
                raise
            if job.deadline - time.monotonic() < MIN_ATTEMPT_S:
                # Nothing is left of the turn: the fallback is not asked after its deadline.
                log.warning("provider.fallback_too_late", turn_id=job.turn_id, kind=err.kind)
                raise
            log.warning(
                "provider.fallback",
                turn_id=job.turn_id,
                kind=err.kind,
                error=err.message,
                main=self.brain[0],
                fallback=self.fallback_brain[0],
            )
            self.switched = (run, err.kind)
            try:
                return await self._ask_fallback(job, err.kind)
            except ProviderError as second:
                raise ProviderError(
                    second.kind,
                    f"{second.message} (the fallback, after the main provider failed: "
                    f"{err.message})",
                    second.retry_after,
                ) from second
        return Answered(completion, *self.brain)

    async def _ask_fallback(self, job: Job, why: str) -> Answered:
        if self.fallback is None:
            assert self.make_fallback is not None
            self.fallback = self.make_fallback()
        messages = job.messages if self.fallback_sees else without_photos(job.messages)
        completion = await self.fallback.complete_with_tools(
            messages, job.tools, deadline=job.deadline
        )
        note = fallback_note(self.fallback_brain, self.brain[0], why)
        return Answered(completion, *self.fallback_brain, note)

    async def aclose(self) -> None:
        """Close both providers' HTTP sessions."""
        await self.main.aclose()
        if self.fallback is not None:
            await self.fallback.aclose()
