"""The console transport's logic: what the terminal shows and what a typed line means.

Used by ``shelldon chat`` (lines typed by the owner) and ``shelldon demo`` (a story of lines fed
one per turn; ``--yes`` answers every approval). The owner at the console is user 0 in chat 0.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from shelldon.contracts import Decision, InboundMessage

CONSOLE_CHAT = 0
CONSOLE_USER = 0
YES = ("y", "yes", "ok", "approve", "sure")


@dataclass(frozen=True, slots=True)
class Prompt:
    """An approval the console is waiting on."""

    turn_id: str
    promotion: bool


class ConsoleSession:
    """Turns typed lines into events and outbound messages into text; drives a demo story."""

    def __init__(self, story: tuple[tuple[str, bool], ...] = (), auto_yes: bool = False) -> None:
        self.story = collections.deque(story)
        self.scripted = bool(story)
        self.auto_yes = auto_yes
        self.input_closed = False
        self.prompts: collections.deque[Prompt] = collections.deque()
        self.waiting_for = ""  # "turn" or "promotion" while a story step is in flight
        self.await_promotion = False
        self.finished = False

    def line_event(self, line: str) -> InboundMessage | Decision | None:
        """The event a typed line makes: the answer to the oldest prompt, else a chat message."""
        text = line.strip()
        if self.prompts:
            prompt = self.prompts.popleft()
            return Decision(CONSOLE_CHAT, CONSOLE_USER, prompt.turn_id, text.lower() in YES)
        if not text:
            return None
        return InboundMessage(CONSOLE_CHAT, CONSOLE_USER, text)

    def ask(self, turn_id: str, promotion: bool) -> Decision | None:
        """Register an approval prompt; with ``auto_yes`` it is answered at once (and once the
        input has closed, nobody can answer: it is a no)."""
        if self.auto_yes or self.input_closed:
            return Decision(CONSOLE_CHAT, CONSOLE_USER, turn_id, self.auto_yes)
        self.prompts.append(Prompt(turn_id, promotion))
        return None

    def close_input(self) -> list[Decision]:
        """The input ended: every open prompt (and every later one) is answered no."""
        self.input_closed = True
        answers = [Decision(CONSOLE_CHAT, CONSOLE_USER, p.turn_id, False) for p in self.prompts]
        self.prompts.clear()
        return answers

    def next_story_line(self) -> str | None:
        """The next line of the demo story, or None when it is over (``finished`` is set)."""
        if not self.story:
            self.finished = True
            return None
        say, await_promotion = self.story.popleft()
        self.waiting_for, self.await_promotion = "turn", await_promotion
        return say

    def on_idle(self) -> bool:
        """A turn ended; True when the story should go on now."""
        if not self.scripted or self.waiting_for != "turn":
            return False
        if self.await_promotion:
            self.waiting_for = "promotion"
            return False
        self.waiting_for = ""
        return True

    def on_settled(self, promotion: bool) -> bool:
        """A decision was handled; True when the story should go on now."""
        if self.scripted and promotion and self.waiting_for == "promotion":
            self.waiting_for = ""
            return True
        return False


def format_reply(text: str) -> str:
    """How shelldon's replies look in the terminal."""
    body = text.rstrip().replace("\n", "\n           ")
    return f"shelldon › {body}\n"


def format_you(text: str) -> str:
    """How the owner's (or the story's) lines look in the terminal."""
    return f"     you › {text}\n"
