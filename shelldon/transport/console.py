"""The console transport's logic: what the terminal shows and what a typed line means.

Used by ``shelldon chat`` (lines typed by the owner) and ``shelldon demo`` (a story of lines fed
one per turn; ``--yes`` answers every approval). The owner at the console is user 0 in chat 0.
Everything printed passes ``visible.for_terminal``: a model's text never reaches the terminal
with an escape sequence in it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from shelldon.contracts import Decision, InboundMessage, ToolCall
from shelldon.core.arbiter import CONSOLE_CHAT, CONSOLE_USER
from shelldon.transport.card import describe_call
from shelldon.transport.visible import for_terminal, reveal

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
        self.step = 0  # the story line in flight (1-based); 0 before the first
        self.step_line = ""
        self.failure = ""  # why the story stopped early: one line for the owner

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
        self.step += 1
        self.step_line = say
        return say

    def _stop(self, why: str) -> bool:
        """End the story early (once); True when this call ended it."""
        if not self.scripted or self.failure or self.finished:
            return False
        self.failure = f"the demo stopped at step {self.step}: {why}"
        self.story.clear()
        return True

    def on_tool_refused(self) -> bool:
        """A proposed tool was refused or failed its gate; True when that ends the story."""
        if self.waiting_for != "promotion" and not self.await_promotion:
            return False
        return self._stop("the tool I wrote did not pass its gate (my reply above says why)")

    def on_step_overdue(self, step: int, budget_s: float) -> bool:
        """The step's time is up; True when that ends the story (not while the owner is being
        asked: a person may take their time)."""
        if step != self.step or not self.waiting_for or self.prompts:
            return False
        return self._stop(f"{self.step_line!r} got no answer within {budget_s:.0f} s")

    def on_idle(self) -> bool:
        """A turn ended; True when the story should go on now."""
        if not self.scripted or self.waiting_for != "turn":
            return False
        if self.await_promotion:
            self.waiting_for = "promotion"
            return False
        self.waiting_for = ""
        return True

    def on_settled(self, promotion: bool, approved: bool = True) -> bool:
        """A decision was handled; True when the story should go on now. A no ends the story
        (``failure`` says so): each step needs the one before it."""
        if not approved:
            what = "adding the tool" if promotion else "the step that needed your approval"
            self._stop(f"you said no to {what}; answer y (or run `shelldon demo --yes`)")
            return False
        if self.scripted and promotion and self.waiting_for == "promotion":
            self.waiting_for = ""
            return True
        return False


STEP_SLACK_S = 30.0
"""Room a story step gets beyond its ceilings, for a slow machine (a Pi runs ~8x slower)."""


def story_step_budget_s(turn_timeout_s: float, gate_timeout_s: float) -> float:
    """How long one story step may take without a person in it: a turn, the turn resumed after
    a tap, and a gate, each at its ceiling, plus ``STEP_SLACK_S``."""
    return 2 * turn_timeout_s + gate_timeout_s + STEP_SLACK_S


INDENT = " " * 11  # the width of the "shelldon" prompt


def format_reply(text: str) -> str:
    """How shelldon's replies look in the terminal (controls a terminal would obey, such as
    escape sequences in a model's reply, are shown as ``⟦U+XXXX⟧``, never sent raw)."""
    body = for_terminal(text.rstrip()).replace("\n", "\n" + INDENT)
    return f"shelldon › {body}\n"


def format_you(text: str) -> str:
    """How the owner's (or the story's) lines look in the terminal."""
    return f"     you › {for_terminal(text)}\n"


def format_gate(summary: str) -> str:
    """A gate run's summary (output of a model-written test) under a promotion question."""
    return INDENT + "gate " + for_terminal(summary).replace("\n", "\n" + INDENT)


def format_replacement(replaces: str, diff: str) -> str:
    """A replacement's line and its diff against the live version, under a promotion question
    (the diff is model-written: hidden characters marked, terminal controls escaped)."""
    body = "\n".join(INDENT + "  " + line if line else "" for line in reveal(diff).split("\n"))
    return for_terminal(f"{INDENT}♻ {reveal(replaces)}\n{body.rstrip()}")


def format_repair_offer(output: str) -> str:
    """Under a failed gate's report: the end of the test run's output and what "y" does."""
    lines = [INDENT + "output " + reveal(output[-1500:]).replace("\n", "\n" + INDENT)]
    lines.append(
        f"{INDENT}Try to fix? y: one more turn for me with what the gate said (it counts "
        "against today's budget); n: drop it."
    )
    return for_terminal("\n".join(lines))


def format_approval(call: ToolCall) -> str:
    """What an approved call would run, as the console shows it before ``[y/N]``: the tool and
    every argument whole (a terminal has no length limit, so nothing is cut), hidden
    characters marked and listed, non-ASCII hosts spelled out, as on the Telegram card."""
    lines = [f"{INDENT}↳ {reveal(call.name)}"]
    deeper = INDENT + "    "
    for arg in describe_call(call):
        value = arg.shown()
        if "\n" in value:
            lines.append(f"{INDENT}  {arg.label}:")
            lines += [deeper + line if line else "" for line in value.split("\n")]
        else:
            lines.append(f"{INDENT}  {arg.label}: {value}")
        lines += [f"{INDENT}  {note}" for note in arg.notes()]
    if not call.args:
        lines.append(f"{INDENT}  (no arguments)")
    return for_terminal("\n".join(lines))
