"""The owner commands: the one table of them, how text is told from a command, and who may
give one."""

from __future__ import annotations

import re
from collections.abc import Iterable

from shelldon.contracts import Decision, InboundMessage

OWNER_COMMANDS: tuple[tuple[str, str], ...] = (
    ("start", "Say hello and see what I can do"),
    ("help", "How to talk to me, and what needs your tap"),
    ("tools", "My tools: live, waiting for you, quarantined, with strikes"),
    ("pending", "Approvals and promotions waiting for your tap, with their age"),
    ("budget", "Today's budget for turns I start myself"),
    ("restore", "Bring a quarantined tool back: /restore NAME"),
    ("memory", "What I remember, numbered"),
    ("forget", "Forget one thing I remember: /forget N"),
    ("new", "Start a fresh conversation (what I remember stays)"),
    ("schedule", "Turns I have scheduled for later, numbered"),
    ("cancel", "Cancel a scheduled turn: /cancel N"),
    ("usage", "Model calls and tokens today and this month, and their cost"),
    ("retire", "Take a tool out of my toolbox for good: /retire NAME"),
)
"""Owner commands, answered without a turn, with the line Telegram's menu (setMyCommands) and
/help show for each: the one table of them."""

CONSOLE_CHAT = 0
CONSOLE_USER = 0
"""The console's one chat and its one person (``shelldon chat`` and ``shelldon demo``)."""


def owners_of(allowed_users: Iterable[int], *, console: bool) -> frozenset[int]:
    """Who may talk to the pet: ``allowed_users``, and at the console the person at it."""
    return frozenset(allowed_users) | ({CONSOLE_USER} if console else frozenset())


_COMMAND = re.compile(r"/([A-Za-z0-9_]{1,32})(?:@[A-Za-z0-9_]{1,64})?(?:\s+(.*))?", re.DOTALL)


def command_of(text: str) -> tuple[str, str] | None:
    """``("restore", "weather")`` for "/restore weather" (also "/restore@my_bot weather");
    None for text that is not shaped like a command ("/tmp/x is full" is chat). The name may
    be no owner command ("/rm -rf"): such text is answered locally, never sent to the model."""
    match = _COMMAND.fullmatch(text.strip())
    if match is None:
        return None
    return match.group(1).lower(), (match.group(2) or "").strip()


def is_chat(event: InboundMessage | Decision) -> bool:
    """Whether ``event`` waits for the turn slot and is answered by a turn (not a tap or an
    owner command, which are answered at once)."""
    return isinstance(event, InboundMessage) and command_of(event.text) is None
