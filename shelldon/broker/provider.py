"""The provider seam: one protocol every model adapter implements, one error they all raise,
and the retry loop that owns backoff and deadlines for all of them.

Errors (``ProviderError.kind``)::

    ProviderError
     ├─ retried while the deadline allows:  rate_limited  overloaded  server  timeout  unreachable
     └─ final at once:                      auth  quota  bad_request  malformed

The SDKs' own retry and timeout defaults (minutes-long timeouts, silent retries, uncapped
``retry-after`` sleeps) would fight the turn's budget, so adapters switch them off and every
call goes through ``call_with_retries``: exponential backoff with full jitter, at least the
server's ``retry-after``, never past the caller's absolute ``deadline`` (``time.monotonic()``),
and an immediate, honest failure when ``retry-after`` is longer than what is left.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import structlog

from shelldon.contracts import Completion, Message, ToolDefinition

log = structlog.get_logger(__name__)

T = TypeVar("T")

RETRYABLE_KINDS = frozenset({"rate_limited", "overloaded", "server", "timeout", "unreachable"})
"""Kinds worth another attempt: the same request may succeed a moment later."""

KINDS = RETRYABLE_KINDS | {"auth", "quota", "bad_request", "malformed"}
"""Every ``ProviderError.kind``; ``JobFailed.kind`` carries one of them."""

MIN_ATTEMPT_S = 0.05
"""Below this much remaining budget an attempt cannot finish; fail instead of starting one."""


class ProviderError(Exception):
    """A model call failed. ``kind`` says how (see the module docstring), ``message`` says what
    to do, ``retry_after`` is the server's requested wait in seconds (None when it gave none).
    The text never holds a credential."""

    def __init__(self, kind: str, message: str, retry_after: float | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown ProviderError kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        """True when the same request may succeed if sent again later."""
        return self.kind in RETRYABLE_KINDS

    def __repr__(self) -> str:
        return f"ProviderError(kind={self.kind!r}, message={self.message!r})"


@runtime_checkable
class Provider(Protocol):
    """A model reached over its native wire format, speaking only shelldon's contracts."""

    async def complete_with_tools(
        self, messages: Sequence[Message], tools: Sequence[ToolDefinition], *, deadline: float
    ) -> Completion:
        """Text or tool calls for ``messages``; raises ``ProviderError``, never past ``deadline``
        (an absolute ``time.monotonic()`` value)."""
        ...

    async def aclose(self) -> None:
        """Release HTTP sessions; the provider may not be used afterwards."""
        ...


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry pacing: the n-th retry waits a random time up to ``min(cap_s, base_s * 2**n)``
    (full jitter), at least the server's ``retry-after``; at most ``max_attempts`` calls."""

    base_s: float = 0.5
    cap_s: float = 8.0
    max_attempts: int = 5

    def delay(self, retry: int, rand: float) -> float:
        """The jittered wait before retry number ``retry`` (0-based); ``rand`` in [0, 1)."""
        return rand * min(self.cap_s, self.base_s * (2.0**retry))


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms``, else ``retry-after`` as seconds or
    an HTTP date; None when absent or unreadable. ``now`` is epoch seconds (for the date form)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            ms = float(raw_ms)
        except ValueError:
            ms = -1.0
        if math.isfinite(ms) and ms >= 0:
            return ms / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds


async def complete_logged(
    attempt: Callable[[float], Awaitable[Completion]],
    *,
    deadline: float,
    what: str,
    backoff: Backoff,
    provider: str,
    model: str,
) -> Completion:
    """``call_with_retries`` for one completion, logging what it cost (the adapters share it)."""
    started = time.perf_counter()
    completion = await call_with_retries(attempt, deadline=deadline, what=what, backoff=backoff)
    log.debug(
        "provider.completion",
        provider=provider,
        model=model,
        input_tokens=completion.usage.input_tokens,
        output_tokens=completion.usage.output_tokens,
        tool_calls=len(completion.tool_calls),
        truncated=completion.truncated,
        ms=round((time.perf_counter() - started) * 1000, 1),
    )
    return completion


async def call_with_retries(
    attempt: Callable[[float], Awaitable[T]],
    *,
    deadline: float,
    what: str,
    backoff: Backoff = Backoff(),
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Run ``attempt(timeout_s)`` until it succeeds, retrying retryable ``ProviderError``s with
    backoff. ``timeout_s`` is what remains of ``deadline``; no sleep or attempt crosses it."""
    attempts = 0
    while True:
        attempts += 1
        left = deadline - clock()
        if left < MIN_ATTEMPT_S:
            raise ProviderError(
                "timeout",
                f"no time left for a model call ({max(left, 0.0):.2f}s of the turn remain)",
            )
        try:
            return await attempt(left)
        except ProviderError as err:
            if not err.retryable:
                log.warning("provider.failed", what=what, kind=err.kind, attempts=attempts)
                raise
            left = deadline - clock()
            why = ""
            if err.retry_after is not None and err.retry_after >= left - MIN_ATTEMPT_S:
                why = (
                    f"; the provider asks to wait {err.retry_after:.1f}s but only "
                    f"{max(left, 0.0):.1f}s of the turn remain, so this turn gives up now"
                )
            elif attempts >= backoff.max_attempts:
                why = f" (gave up after {attempts} attempts)"
            else:  # the jitter is drawn only for a retry that may happen
                delay = max(backoff.delay(attempts - 1, rand()), err.retry_after or 0.0)
                if delay >= left - MIN_ATTEMPT_S:
                    why = f" (no time left in the turn to retry after {attempts} attempts)"
            if why:
                log.warning(
                    "provider.gave_up",
                    what=what,
                    kind=err.kind,
                    attempts=attempts,
                    retry_after_s=err.retry_after,
                )
                raise ProviderError(err.kind, err.message + why, err.retry_after) from err
            log.info(
                "provider.retry", what=what, kind=err.kind, retry=attempts, delay_s=round(delay, 3)
            )
            await sleep(delay)


def object_schema(params_schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's arguments schema as the APIs take it: always a JSON object, never empty."""
    if not params_schema:
        return {"type": "object", "properties": {}}
    return {"type": "object", **params_schema}


def scrub(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced, so no error text carries a key."""
    if secret:
        text = text.replace(secret, "[redacted]")
    return text


def clip(text: str, limit: int = 300) -> str:
    """At most ``limit`` characters of ``text`` (server error bodies can be pages of HTML)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
