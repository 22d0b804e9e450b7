"""The strike rule: a self-coded tool that fails in a turn earns a strike (a built-in never
does: its failures are the world's, not its code's), and one that reaches the threshold goes
into quarantine."""

from __future__ import annotations

from collections.abc import Iterable

from shelldon.contracts import ToolFailure


def struck(failures: Iterable[ToolFailure], approved: Iterable[str]) -> tuple[ToolFailure, ...]:
    """The failures that earn their tool a strike: only those of tools the owner approved (the
    service's own record of what is self-coded, not the worker's)."""
    names = frozenset(approved)
    return tuple(failure for failure in failures if failure.name in names)


def quarantine_reason(strikes: int, last_error: str) -> str:
    """Why a tool was quarantined, as the toolbox records it."""
    return f"{strikes} strikes; last error: {last_error}"


def quarantined_text(name: str, strikes: int, last_error: str) -> str:
    """What the owner is told when a tool goes into quarantine, and how to bring it back."""
    return (
        f"I put my tool {name} in quarantine: it failed {strikes} "
        f"times (last: {last_error[:300]}). /restore {name} brings it back."
    )
