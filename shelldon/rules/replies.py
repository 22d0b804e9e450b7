"""The fixed replies a turn can end with, in one place: the apology for every way a turn can go
wrong, and the question a parked RISKY call asks.

The worker (a failed model call) and the actor side (a worker it had to stop) both answer from
``APOLOGIES``, so the owner reads one voice whichever side noticed.
"""

from __future__ import annotations

from shelldon.contracts import JobFailed

STOPPED = "stopped"
"""Cause: the actor side stopped the worker (``kind`` as TurnActor and ``TurnWatch`` name it)."""

MODEL = "model"
"""Cause: a model call failed (``kind`` is ``JobFailed.kind``)."""

APOLOGIES: dict[tuple[str, str], str] = {
    (STOPPED, "timeout"): (
        "Sorry — that took longer than I'm allowed, so I stopped. Try again, maybe simpler?"
    ),
    (STOPPED, "ceiling"): "Sorry — I went over my limit of model calls for one turn, so I stopped.",
    (STOPPED, "crash"): (
        "Sorry — something broke inside me while thinking about that. Please try again."
    ),
    (STOPPED, "protocol"): "Sorry — my worker misbehaved, so I stopped it. Please try again.",
    (STOPPED, "memory"): (
        "Sorry — that needed more memory than one turn may have, so the kernel stopped it. "
        "I'm fine otherwise; try something smaller?"
    ),
    (MODEL, "rate_limited"): "Sorry — the model is rate-limited, try again in a minute.",
    (MODEL, "overloaded"): "Sorry — the model is overloaded right now, try again in a few minutes.",
    (MODEL, "timeout"): "Sorry — the model took too long to answer, try again.",
    (MODEL, "auth"): "Sorry — the model refused my credentials; the API key needs checking.",
    (MODEL, "bad_request"): "Sorry — the model rejected my request; try rephrasing.",
    (MODEL, "server"): "Sorry — the model's server had an error, try again shortly.",
    (MODEL, "unreachable"): "Sorry — I could not reach the model, try again shortly.",
    (MODEL, "quota"): "Sorry — the model's quota is used up; the account needs checking.",
    (MODEL, "malformed"): "Sorry — the model's answer came back garbled, try again.",
    (MODEL, "channel"): "Sorry — I lost contact with my brain mid-turn, try again.",
    (MODEL, "no_key"): (
        "Sorry — no API key configured for the model; `shelldon doctor` says where it goes."
    ),
    (MODEL, "unconfigured"): (
        "Sorry — my brain is not configured correctly; `shelldon doctor` says what is wrong."
    ),
}
"""Every apology, by ``(cause, kind)``: the one table of them."""


def stopped_apology(kind: str) -> str:
    """The reply when the actor side stopped a worker for ``kind``."""
    return APOLOGIES[(STOPPED, kind)]


def model_apology(failed: JobFailed) -> str:
    """The reply for a failed model call: short, honest, naming what went wrong (a kind nobody
    named yet is reported as it is)."""
    if failed.kind == "rate_limited" and failed.retry_after:
        wait = max(1, round(failed.retry_after))
        return f"Sorry — the model is rate-limited, try again in {wait} s."
    return APOLOGIES.get((MODEL, failed.kind), f"Sorry — the model call failed ({failed.kind}).")


def approval_question(summary: str) -> str:
    """What a parked RISKY call asks the owner: the turn's reply and the keyboard's caption."""
    return f"I'd like to run {summary} — approve?"


def _waited(seconds: float) -> str:
    minutes = max(1, round(seconds / 60))
    if minutes < 120:
        return f"{minutes} min"
    return f"{round(minutes / 60)} h"


def expired_notice(kind: str, summary: str, waited_s: float) -> str:
    """What the owner is told when a parked approval (``kind`` "approval") or promotion
    expired untapped: what it was, that nothing happened, and what to do."""
    if kind == "approval":
        return (
            f"⌛ Your approval to run {summary} expired after {_waited(waited_s)} without a "
            "tap, so nothing ran. Ask me again if you still want it."
        )
    if kind == "repair":
        return (
            f"⌛ The offer to fix {summary} expired after {_waited(waited_s)} without a tap, so "
            "I tried nothing. Ask me to write it again if you still want it."
        )
    return (
        f"⌛ The request to add {summary} expired after {_waited(waited_s)} without a tap, "
        "so it was not added."
    )
