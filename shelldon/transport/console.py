"""The console transport's logic: what the terminal shows and what a typed line means.

Used by ``shelldon chat`` (lines typed by the owner) and ``shelldon demo`` (a story of lines fed
one per turn; ``--yes`` answers every approval). The owner at the console is user 0 in chat 0.
Everything printed passes ``visible.for_terminal``: a model's text never reaches the terminal
with an escape sequence in it.
"""

from __future__ import annotations

import collections
import dataclasses
from dataclasses import dataclass

from shelldon import replies
from shelldon.contracts import ContractError, Decision, InboundMessage, ToolCall
from shelldon.rules.commands import CONSOLE_CHAT, CONSOLE_USER
from shelldon.rules.replies import approval_question, waited
from shelldon.store import Store
from shelldon.store.parked import parked_call
from shelldon.transport.card import describe_call
from shelldon.transport.visible import for_terminal, reveal

YES = ("y", "yes")
NO = ("n", "no")
"""The only answers that decide at a ``[y/N]`` prompt; any other line is asked again."""

ASK = "[y/N] "


@dataclass(frozen=True, slots=True)
class Prompt:
    """An approval the console is waiting on; ``what`` names it when the owner is asked
    again."""

    turn_id: str
    promotion: bool
    what: str = ""
    # Left open by an earlier session: the end of this session's input does not decide it.
    reopened: bool = False


@dataclass(frozen=True, slots=True)
class AskAgain:
    """A line typed at a prompt that is neither yes nor no: it decides nothing, is sent
    nowhere, and the prompt is asked again."""

    prompt: Prompt
    line: str


def ask_again_text(again: AskAgain) -> str:
    """What the console says to a line that answered a prompt with neither yes nor no."""
    what = again.prompt.what or ("adding the tool" if again.prompt.promotion else "that call")
    return (
        f"Please answer y or n: I'm waiting for your yes or no on {what}. "
        "That line was not sent to me."
    )


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

    def line_event(self, line: str) -> InboundMessage | Decision | AskAgain | None:
        """The event a typed line makes: y/yes or n/no answer the oldest prompt, any other
        line at a prompt is ``AskAgain``; with no prompt open it is a chat message."""
        text = line.strip()
        if self.prompts:
            answer = text.lower()
            if answer not in YES + NO:
                return AskAgain(self.prompts[0], text)
            prompt = self.prompts.popleft()
            return Decision(CONSOLE_CHAT, CONSOLE_USER, prompt.turn_id, answer in YES)
        if not text:
            return None
        return InboundMessage(CONSOLE_CHAT, CONSOLE_USER, text)

    def ask(self, turn_id: str, promotion: bool, what: str = "") -> Decision | None:
        """Register an approval prompt; with ``auto_yes`` it is answered at once (and once the
        input has closed, nobody can answer: it is a no)."""
        if self.auto_yes or self.input_closed:
            return Decision(CONSOLE_CHAT, CONSOLE_USER, turn_id, self.auto_yes)
        if all(p.turn_id != turn_id for p in self.prompts):
            self.prompts.append(Prompt(turn_id, promotion, what))
        return None

    def forget(self, turn_id: str) -> None:
        """Drop the prompt for ``turn_id`` (decided elsewhere, or expired)."""
        self.prompts = collections.deque(p for p in self.prompts if p.turn_id != turn_id)

    def reopen(self, prompt: Prompt) -> None:
        """Open again a prompt an earlier session left undecided."""
        if all(p.turn_id != prompt.turn_id for p in self.prompts):
            self.prompts.append(dataclasses.replace(prompt, reopened=True))

    def close_input(self) -> list[Decision]:
        """The input ended: every prompt of this session (and every later one) is answered no;
        one reopened from an earlier session stays parked for the owner to decide later."""
        self.input_closed = True
        answers = [
            Decision(CONSOLE_CHAT, CONSOLE_USER, p.turn_id, False)
            for p in self.prompts
            if not p.reopened
        ]
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
    """Under a failed gate's report: the end of the test run's output (as the card carries
    it: ``promotion.OUTPUT_CHARS``) and what "y" does."""
    lines = [INDENT + "output " + reveal(output).replace("\n", "\n" + INDENT)]
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


@dataclass(frozen=True, slots=True)
class Reopened:
    """A decision an earlier session left open: its prompt, and what to print before it."""

    prompt: Prompt
    shown: str


def reopen_parked(store: Store, now: float) -> list[Reopened]:
    """The approvals and promotions parked for the console's chat, oldest first, each shown
    again as it was asked, so a new session can decide them."""
    found = []
    for parked in store.parked.pending():
        if parked.chat_id != CONSOLE_CHAT:
            continue
        since = f"Still waiting for your answer from {waited(now - parked.created_at)} ago: "
        if parked.kind == "approval":
            try:
                op = parked_call(store.parked.parked_approval(parked.turn_id))
            except ContractError:
                # Unreadable: a tap on it is refused and audited; the owner still gets to see
                # that something waits.
                label, shown = parked.summary, format_reply(since + parked.summary)
            else:
                label = replies.describe_call(op.call)
                question = approval_question(label)
                shown = format_reply(since + question) + format_approval(op.call) + "\n"
            found.append(Reopened(Prompt(parked.turn_id, False, label), shown))
        else:
            promotion = store.parked.parked_promotion(parked.turn_id)
            if promotion is None:
                continue
            name, code = promotion
            question = f"add the tool {name} to my toolbox? It passed its test; its code:"
            listing = code.decode("utf-8", "replace").rstrip("\n").split("\n")
            body = "\n".join(INDENT + "  " + line for line in listing)
            shown = format_reply(since + question) + for_terminal(body) + "\n"
            label = f"adding the tool {name}"
            found.append(Reopened(Prompt(parked.turn_id, True, label), shown))
    return found
