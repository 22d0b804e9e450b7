"""The words both sides of a turn use: the apology for every way a turn can go wrong, and how
a tool call reads to the owner.

The worker (a failed model call) and the actor side (a worker it had to stop) both answer from
``APOLOGIES``, so the owner reads one voice whichever side noticed; both describe a call with
``describe_call``, so the worker's words for a call are the parent's.
"""

from __future__ import annotations

import json

from shelldon.contracts import JobFailed, ToolCall

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


_VALUE_CHARS = 200
_SUMMARY_CHARS = 1000


def describe_call(call: ToolCall) -> str:
    """Exactly what will run, for the owner: ``name(key=value, ...)`` with long values elided
    (the approval card carries them whole)."""
    parts = []
    for key, value in call.args.items():
        rendered = json.dumps(value, ensure_ascii=False, sort_keys=True)
        if len(rendered) > _VALUE_CHARS:
            cut = len(rendered) - _VALUE_CHARS
            rendered = f"{rendered[:_VALUE_CHARS]}…(+{cut} chars)"
        parts.append(f"{key}={rendered}")
    summary = f"{call.name}({', '.join(parts)})"
    if len(summary) > _SUMMARY_CHARS:
        summary = f"{summary[:_SUMMARY_CHARS]}…)"
    return summary
