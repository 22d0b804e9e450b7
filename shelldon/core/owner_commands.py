"""Answers to the owner's commands (/start /help /tools /pending /budget /restore).

They need no turn, no worker and no model: plain reads of the store and the tool directories.
"""

from __future__ import annotations

from shelldon.config import Settings
from shelldon.core.arbiter import OWNER_COMMANDS, budget_day
from shelldon.core.history import Store
from shelldon.core.selfcode import SelfCode, SelfCodeError

HELP = (
    "I'm shelldon, your pet agent. Just talk to me.\n"
    "I use tools on my own when they are harmless, and ask you before anything risky "
    "(writing files, running commands, fetching URLs, git). I can also write new tools "
    "for myself; you approve each one.\n\n"
    + "\n".join(f"/{name} — {line}" for name, line in OWNER_COMMANDS if name != "start")
)


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


def tools_text(store: Store, selfcode: SelfCode) -> str:
    """/tools: live, staged and quarantined self-coded tools, with strikes; files that will not
    run because they are not what the owner approved; and why self-coded tools are off, if so."""
    strikes = {h.name: h for h in store.tool_health()}
    lines = [
        "Built-in: get_time, read_file, list_dir, python_eval (free); "
        "write_file, run_shell, http_get, git (ask first)."
    ]

    def with_strikes(name: str) -> str:
        h = strikes.get(name)
        return f"{name} ({h.strikes} strike{'s' if h.strikes != 1 else ''})" if h else name

    off = selfcode.off_reason()
    if off:
        lines.append(f"⚠️ {off[0].upper()}{off[1:]}.")
    tampered = selfcode.tampered()
    bad = {t.name for t in tampered if t.state == "live"}
    live = tuple(n for n in selfcode.live() if n not in bad)
    lines.append("Self-coded, live: " + (", ".join(map(with_strikes, live)) or "none yet"))
    if tampered:
        lines.append(
            "Never run, not the code you approved (propose again to change a tool): "
            + ", ".join(f"{t.name} ({t.problem})" for t in tampered)
        )
    staged = selfcode.staged()
    if staged:
        lines.append("Waiting for your approval: " + ", ".join(staged))
    quarantined = selfcode.quarantined()
    if quarantined:
        lines.append(
            "Quarantined: "
            + ", ".join(
                f"{with_strikes(n)} — {selfcode.quarantine_reason(n) or 'failed repeatedly'}"
                for n in quarantined
            )
        )
        lines.append("Bring one back with /restore NAME.")
    return "\n".join(lines)


def pending_text(store: Store, now: float) -> str:
    """/pending: parked approvals and promotions with their age."""
    rows = store.pending()
    if not rows:
        return "Nothing is waiting for you."
    lines = [f"{len(rows)} waiting for your tap:"]
    for p in rows:
        what = "run" if p.kind == "approval" else "add tool"
        left = p.expires_at - now
        lines.append(
            f"• {what}: {p.summary} — {_age(now - p.created_at)} old, expires in {_age(left)}"
        )
    return "\n".join(lines)


def budget_text(store: Store, settings: Settings, now: float) -> str:
    """/budget: today's scheduler budget."""
    spent = store.budget_spent(budget_day(now))
    limit = settings.limits.daily_turn_budget
    return (
        f"Turns I started myself today: {spent} of {limit}. "
        "Your own messages are never budgeted (each is capped at "
        f"{settings.limits.max_tool_executions} tool runs and "
        f"{settings.limits.turn_timeout_s:g} s)."
    )


def restore_tool(store: Store, selfcode: SelfCode, name: str, now: float) -> str:
    """/restore NAME: move a quarantined tool back to live with its strikes reset."""
    if not name:
        q = selfcode.quarantined()
        return "Usage: /restore NAME. Quarantined: " + (", ".join(q) if q else "none")
    try:
        selfcode.restore(name)
    except (SelfCodeError, FileNotFoundError, OSError) as exc:
        return f"Could not restore {name}: {exc}"
    store.reset_strikes(name)
    store.audit("owner", "restored", name, {}, now)
    return f"Restored {name}: it is live again with its strikes reset."


def answer_command(
    name: str, arg: str, store: Store, selfcode: SelfCode, settings: Settings, now: float
) -> str:
    """The reply to owner command ``name`` with argument ``arg`` (any other name is told
    which commands there are)."""
    match name:
        case "start" | "help":
            return HELP
        case "tools":
            return tools_text(store, selfcode)
        case "pending":
            return pending_text(store, now)
        case "budget":
            return budget_text(store, settings, now)
        case "restore":
            return restore_tool(store, selfcode, arg, now)
    return unknown_command_text(name)


def unknown_command_text(name: str) -> str:
    """The answer to a ``/name`` that is no owner command: it was not sent to the model."""
    known = " ".join(f"/{command}" for command, _ in OWNER_COMMANDS)
    return (
        f"I don't know /{name}, so I did nothing with it (it was not passed on to me as a "
        f"message). My commands: {known}. To ask me something, write it without the /."
    )
