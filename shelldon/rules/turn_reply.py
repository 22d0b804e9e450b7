"""What the owner reads when a turn ends: the model's reply, then in the pet's own words what it
will remember, and the question of a parked call.

The model's part may be Markdown (the transport renders it); the pet's own words are sent as
written, so a fact or a call is shown exactly as stored or as it would run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from shelldon.contracts import Op, Remember, RequestToolApproval, ToolFailure
from shelldon.replies import describe_call
from shelldon.rules.replies import approval_question

REMEMBER_NOTE = "📝 I'll remember: "
"""How a fact the turn stored is shown to the owner (followed by the fact, as stored)."""

MEMORY_NOTE = "🧠 My tool {name} ran out of memory: it needed more than one turn may have."
"""Told once per tool whose call failed for want of memory (its address-space cap)."""


@dataclass(frozen=True, slots=True)
class TurnReply:
    """The reply's ``text``; its first ``markdown_chars`` characters are the model's Markdown,
    the rest is literal."""

    text: str
    markdown_chars: int


def one_line(fact: str) -> str:
    """``fact`` on one line, line breaks shown as ``↵``: a fact the model wrote cannot pose as
    more of the pet's own lines (a question, another note)."""
    if fact.splitlines() == [fact]:  # no break of any kind (\n, \r, U+2028, …)
        return fact
    return " ↵ ".join(part.strip() for part in fact.splitlines() if part.strip())


def remember_notes(ops: Iterable[Op]) -> list[str]:
    """One note per distinct fact the turn asks to remember."""
    facts = dict.fromkeys(op.fact for op in ops if isinstance(op, Remember))
    return [REMEMBER_NOTE + one_line(fact) for fact in facts]


def memory_notes(failures: Iterable[ToolFailure]) -> list[str]:
    """One note per tool whose call ran out of memory, whatever the model made of it."""
    names = dict.fromkeys(f.name for f in failures if f.error.startswith("MemoryError"))
    return [MEMORY_NOTE.format(name=name) for name in names]


def turn_reply(
    reply: str, ops: Iterable[Op], failures: Iterable[ToolFailure] = (), fallback: str = ""
) -> TurnReply:
    """The owner's reply for a turn that said ``reply``, ends with ``ops`` (those that will be
    applied) and had ``failures`` (those charged); ``fallback`` is the line saying the fallback
    provider answered. A parked call's question, when the reply ends with it, is kept literal:
    it is built from the call itself, and Markdown must not restyle a command line."""
    ops = tuple(ops)
    lead, question = reply, ""
    for op in ops:
        if isinstance(op, RequestToolApproval):
            asked = approval_question(describe_call(op.call))
            if reply.endswith(asked):
                lead, question = reply[: -len(asked)].rstrip(), asked
            break
    parts = [lead, *memory_notes(failures), *remember_notes(ops), fallback, question]
    return TurnReply("\n\n".join(filter(None, parts)), len(lead))
