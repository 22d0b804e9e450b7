"""The console side of the TransportActor (``shelldon chat`` / ``shelldon demo``): lines typed
at the terminal become inbox rows, replies and questions are written back, and the demo's story
is walked one step at a time under a deadline."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import select
import time
from typing import TYPE_CHECKING

from actors.messages import CONSOLE_DONE, CONSOLE_FAILED, TOOL_REFUSED, Boot, InboxChanged
from actors.transport_side import TransportSide
from shelldon import replies
from shelldon.contracts import Decision, InboundMessage, encode
from shelldon.rules.commands import is_chat
from shelldon.rules.effects import AskOwner, ExpireCard, Say, SettleTap
from shelldon.transport.console import (
    ASK,
    INDENT,
    AskAgain,
    ConsoleSession,
    ask_again_text,
    format_approval,
    format_gate,
    format_repair_offer,
    format_replacement,
    format_reply,
    format_you,
    reopen_parked,
    story_step_budget_s,
)

if TYPE_CHECKING:
    from actors.transport import TransportActor


def _pollable(fd: int) -> bool:
    """Whether ``fd`` can be watched (epoll refuses regular files and /dev/null)."""
    with select.epoll() as probe:
        try:
            probe.register(fd, select.EPOLLIN)
        except OSError:
            return False
    return True


class ConsoleSide(TransportSide):
    """The terminal: reads the owner's lines from ``in_fd``, writes to ``out_fd``, and writes
    one status byte to ``done_fd`` when the session ends."""

    def __init__(self, actor: TransportActor, boot: Boot) -> None:
        super().__init__(actor)
        self.in_fd, self.out_fd, self.done_fd = boot.console_fds
        self.session = ConsoleSession(boot.story, boot.auto_yes)
        self.in_buffer = b""
        self.asked: dict[str, bool] = {}
        self.awaiting = 0  # chat lines typed whose turn has not ended yet
        self.input_closed = False
        if boot.story:
            self._story_next()
        else:
            self._write("shelldon is listening. Type a message (Ctrl-D to quit).\n")
            self._reopen_parked()
        if self.in_fd >= 0 and not (boot.story and boot.auto_yes):
            if _pollable(self.in_fd):
                os.set_blocking(self.in_fd, False)
                actor.watch(self.in_fd)
            else:
                # A file or /dev/null as input: epoll refuses it, and reading never blocks, so
                # take it all now (its end is the end of input).
                while self._console_input():
                    pass

    def _reopen_parked(self) -> None:
        """Ask again what an earlier session left undecided (the owner can decide it now)."""
        assert self.actor.store is not None
        for reopened in reopen_parked(self.actor.store, time.time()):
            prompt = reopened.prompt
            self.asked[prompt.turn_id] = prompt.promotion
            self.session.reopen(prompt)
            self._write(reopened.shown + INDENT + ASK)

    def _write(self, text: str) -> None:
        if self.out_fd >= 0:
            data = text.encode("utf-8", "replace")
            with contextlib.suppress(OSError):
                while data:
                    data = data[os.write(self.out_fd, data) :]

    def _handoff(self, event: InboundMessage | Decision) -> None:
        assert self.actor.store is not None
        self.actor.store.inbox.put(encode(event), time.time())
        self.actor.send(self.actor.peers["arbiter"], InboxChanged())

    def _story_next(self) -> None:
        if self.session.failure:
            return
        line = self.session.next_story_line()
        if line is None:
            self._write("— end of the demo —\n")
            self._finish()
            return
        self._write(format_you(line))
        self._handoff(InboundMessage(0, 0, line))
        self._arm_step_deadline()

    def _step_budget_s(self) -> float:
        assert self.actor.settings is not None
        limits = self.actor.settings.limits
        return story_step_budget_s(limits.turn_timeout_s, limits.gate_timeout_s)

    def _arm_step_deadline(self) -> None:
        budget = dt.timedelta(seconds=self._step_budget_s())
        self.actor.wakeupAfter(budget, payload=("story-step", self.session.step))

    def _end_story(self) -> None:
        """The story cannot go on: say why in one line and end the session with status 1."""
        self._write(f"shelldon: {self.session.failure}\n")
        self._finish(failed=True)

    def _finish(self, failed: bool = False) -> None:
        if self.done_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.done_fd, CONSOLE_FAILED if failed else CONSOLE_DONE)
                os.close(self.done_fd)
            self.done_fd = -1

    def _console_input(self) -> bool:
        """Read what the owner typed; False once the input has ended."""
        try:
            data = os.read(self.in_fd, 65536)
        except BlockingIOError:
            return True
        if not data:
            self.actor.unwatch(self.in_fd)
            for answer in self.session.close_input():
                self._write("(no input: no)\n")
                self._handoff(answer)
            if not self.session.scripted:
                # End of input: let the turns already typed finish (close_input has answered
                # every prompt no), and give a command's answer a moment.
                self.input_closed = True
                if not self.awaiting:
                    self.actor.wakeupAfter(dt.timedelta(seconds=0.3), payload="console-done")
            return False
        self.in_buffer += data
        while b"\n" in self.in_buffer:
            raw, self.in_buffer = self.in_buffer.split(b"\n", 1)
            event = self.session.line_event(raw.decode("utf-8", "replace"))
            if isinstance(event, AskAgain):
                self._write(format_reply(ask_again_text(event)) + INDENT + ASK)
                continue
            if event is not None and not (
                self.session.scripted and isinstance(event, InboundMessage)
            ):
                if is_chat(event):
                    self.awaiting += 1
                self._handoff(event)
        return True

    def ready(self, fds: list[int]) -> None:
        if self.in_fd >= 0 and self.in_fd in fds:
            self._console_input()

    def reply(self, msg: Say) -> None:
        self._write(format_reply(msg.text))
        if msg.kind == TOOL_REFUSED and self.session.on_tool_refused():
            self._end_story()

    def ask(self, msg: AskOwner) -> None:
        if msg.failed and self.session.on_tool_refused():
            # The demo's story needed that tool: it ends here, with one line saying why.
            self._write(format_reply(msg.text))
            self._end_story()
            return
        promotion = msg.proposal is not None and not msg.failed
        self.asked[msg.turn_id] = promotion
        # The question, then exactly what would run (or the gate's verdict on the new tool).
        lines = [format_reply(msg.text).rstrip("\n")]
        if msg.call is not None:
            lines.append(format_approval(msg.call))
            what = replies.describe_call(msg.call)
        else:
            lines.append(format_gate(msg.gate_summary))
            if msg.replaces:
                lines.append(format_replacement(msg.replaces, msg.diff))
            if msg.failed:
                lines.append(format_repair_offer(msg.output))
                what = f"trying to fix the tool {msg.proposal.name}" if msg.proposal else ""
            else:
                what = f"adding the tool {msg.proposal.name}" if msg.proposal else ""
        answer = self.session.ask(msg.turn_id, promotion, what)
        if answer is not None:
            lines.append(INDENT + ASK + ("y   (--yes)" if answer.approved else "n   (no input)"))
            self._write("\n".join(lines) + "\n")
            self._handoff(answer)
        else:
            self._write("\n".join(lines) + "\n" + INDENT + ASK)

    def settle(self, msg: SettleTap) -> None:
        self._write(format_reply(msg.outcome))
        if not msg.final:
            return  # queued behind a running turn: the final outcome follows
        self.session.forget(msg.decision.turn_id)
        promotion = self.asked.pop(msg.decision.turn_id, False)
        if self.session.on_settled(promotion, msg.decision.approved is True):
            self._story_next()
        elif self.session.failure:
            self._end_story()

    def expire(self, msg: ExpireCard) -> None:
        self.session.forget(msg.turn_id)
        self.asked.pop(msg.turn_id, None)
        self._write(format_reply(msg.notice))

    def idle(self) -> None:
        self.awaiting = max(0, self.awaiting - 1)
        if self.input_closed and not self.awaiting:
            self._finish()
            return
        if self.session.on_idle():
            self._story_next()

    def wakeup(self, payload: object) -> None:
        if payload == "console-done":
            self._finish()
        elif isinstance(payload, tuple) and payload[:1] == ("story-step",):
            step = payload[1]
            if self.session.on_step_overdue(step, self._step_budget_s()):
                self._end_story()
            elif step == self.session.step and self.session.waiting_for:
                self._arm_step_deadline()  # the owner is being asked: wait for them
