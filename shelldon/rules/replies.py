"""The arbiter's fixed words for the owner: what a tapped, queued or expired card says, the
question a parked RISKY call asks, and why a turn the pet starts itself did not start."""

from __future__ import annotations

BUSY_REPLY = (
    "I'm still busy with your earlier messages, so I dropped this one — send it again in a bit."
)
EXPIRED = "⌛ Expired — nothing ran."
EXPIRED_PROMOTION = "⌛ Expired — not added."
EXPIRED_REPAIR = "⌛ Expired — no fix was tried."
EXPIRED_BY_KIND = {"promotion": EXPIRED_PROMOTION, "repair": EXPIRED_REPAIR}
"""What an expired card says, by the kind of what was parked (an approval: ``EXPIRED``)."""
GONE = "This approval was already decided or has expired; your tap changed nothing."
APPROVED = "✅ Approved — running it now."
DENIED = "❌ Denied — I won't run it."
QUEUED_APPROVED = "✅ Approved — I'll run it as soon as I finish what I'm doing."
QUEUED_DENIED = "❌ Denied — it won't run; I'll carry on once I finish what I'm doing."
QUEUED_REPAIR = "🔧 I'll try to fix it as soon as I finish what I'm doing."
UNREADABLE = "⚠ That approval could not be read back, so nothing ran. Ask me again."
LOST = "⚠ Another turn started before your tap was applied, so nothing ran. Ask me again."
BUDGET_SPENT = (
    "I skipped a scheduled task: today's budget for turns I start myself is spent. "
    "/budget shows it."
)
REPAIR_BUDGET_SPENT = (
    "Today's budget for turns I start myself is spent, so I can't try to fix it now; "
    "tap again tomorrow (/budget shows it)."
)
REPAIR_BUSY = "I was busy with another turn, so I did not start the fix; ask me to fix it."
REPAIR_CAPPED = "That tool had its repair rounds already, so I won't try again."


def approval_question(summary: str) -> str:
    """What a parked RISKY call asks the owner: the turn's reply and the keyboard's caption."""
    return f"I'd like to run {summary} — approve?"


def waited(seconds: float) -> str:
    """How long something waited, as the owner reads it: "40 s", "25 min", "3 h"."""
    if seconds < 90:
        return f"{max(0, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 120 else f"{round(minutes / 60)} h"


def expired_notice(kind: str, summary: str, waited_s: float) -> str:
    """What the owner is told when a parked approval (``kind`` "approval") or promotion
    expired untapped: what it was, that nothing happened, and what to do."""
    if kind == "approval":
        return (
            f"⌛ Your approval to run {summary} expired after {waited(waited_s)} without a "
            "tap, so nothing ran. Ask me again if you still want it."
        )
    if kind == "repair":
        return (
            f"⌛ The offer to fix {summary} expired after {waited(waited_s)} without a tap, so "
            "I tried nothing. Ask me to write it again if you still want it."
        )
    return (
        f"⌛ The request to add {summary} expired after {waited(waited_s)} without a tap, "
        "so it was not added."
    )
