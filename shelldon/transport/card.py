"""What an approval card says about a RISKY call, before it is drawn for Telegram or a terminal:
one description for both transports, so they cannot drift apart. Whether a value fits on the
card or travels whole as a document is decided here too; nothing is ever cut without the whole
value going along.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shelldon.contracts import ToolCall
from shelldon.transport.visible import (
    ForeignHost,
    HiddenCharacter,
    foreign_hosts,
    hidden_characters,
    reveal,
)

PREVIEW_CHARS = 600
"""How much of a value too long for the card is shown on it (the whole goes as a document)."""
EXACT_CHARS = 2500
"""Past this an argument goes as a document; bulk arguments (file content) past PREVIEW_CHARS."""
KINDS_LISTED = 6  # hidden-character kinds or hosts named per argument; the count covers all

# Argument names whose values are bulk data (previewed); every other value is shown whole.
BULK_ARGS = frozenset(
    {"content", "contents", "data", "body", "text", "code", "input", "stdin", "patch", "payload"}
)


def argument_text(value: Any) -> str:
    """An argument's value as the text the owner reads (strings as they are, others as JSON)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, indent=1, sort_keys=True, default=repr)


@dataclass(frozen=True, slots=True)
class ArgumentCard:
    """One argument of a RISKY call, as the owner must see it."""

    name: str
    exact: str
    bulk: bool
    hidden: tuple[HiddenCharacter, ...]
    hosts: tuple[ForeignHost, ...]

    @property
    def label(self) -> str:
        """The argument's name, hidden characters marked."""
        return reveal(self.name)

    @property
    def fits(self) -> bool:
        """Whether the whole value goes on the card (else a preview, and the whole as a file)."""
        return len(self.exact) <= (PREVIEW_CHARS if self.bulk else EXACT_CHARS)

    def shown(self, limit: int | None = None) -> str:
        """The value (its first ``limit`` characters) with hidden characters marked."""
        return reveal(self.exact if limit is None else self.exact[:limit])

    def notes(self) -> list[str]:
        """Plain-text warnings: which hidden characters the value holds, which hosts are not
        what they look like. Empty for an ordinary value."""
        notes = []
        if self.hidden:
            total = sum(h.count for h in self.hidden)
            kinds = "; ".join(str(h) for h in self.hidden[:KINDS_LISTED])
            more = len(self.hidden) - KINDS_LISTED
            if more > 0:
                kinds += f"; and {more} more kinds"
            plural = "s" if total > 1 else ""
            notes.append(f"⚠ {self.label}: {total} hidden character{plural}, marked ⟦U+…⟧: {kinds}")
        notes += [f"🌐 {self.label}: {host}" for host in self.hosts[:KINDS_LISTED]]
        if len(self.hosts) > KINDS_LISTED:
            notes.append(f"🌐 {self.label}: and {len(self.hosts) - KINDS_LISTED} more such hosts")
        return notes


def describe_call(call: ToolCall) -> tuple[ArgumentCard, ...]:
    """Every argument of ``call``, in the order the model gave them."""
    cards = []
    for name, value in call.args.items():
        text = argument_text(value)
        key = str(name)
        cards.append(
            ArgumentCard(
                name=key,
                exact=text,
                bulk=key.lower() in BULK_ARGS,
                hidden=hidden_characters(text),  # the name is marked in ``label``
                hosts=foreign_hosts(text),
            )
        )
    return tuple(cards)
