"""TransportActor: the front door. Inbound events are durably handed off to the inbox table
before anything else (then the arbiter is told); outbound replies, approval keyboards and
outcomes go to the owner. Two transports: Telegram (network I/O on an asyncio loop in a thread,
so a long poll never blocks sending) and the console (``shelldon chat`` / ``shelldon demo``)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import select
import time
from typing import Any

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, WakeupMessage, WatchMessage

from actors.base import ContractActor
from actors.bridge import AsyncBridge
from actors.messages import (
    CONSOLE_DONE,
    CONSOLE_FAILED,
    TOOL_REFUSED,
    AskOwner,
    CardExpired,
    Fatal,
    Idle,
    InboxChanged,
    Reply,
    Settle,
    TransportPolling,
    Typing,
    Wire,
)
from shelldon.config import Settings
from shelldon.contracts import Decision, InboundMessage, encode
from shelldon.rules.arbiter import is_chat
from shelldon.store import Store
from shelldon.transport.console import (
    ASK,
    INDENT,
    AskAgain,
    ConsoleSession,
    ask_again_text,
    call_label,
    format_approval,
    format_gate,
    format_repair_offer,
    format_replacement,
    format_reply,
    format_you,
    reopen_parked,
    story_step_budget_s,
)

log = structlog.get_logger(__name__)


def _pollable(fd: int) -> bool:
    """Whether ``fd`` can be watched (epoll refuses regular files and /dev/null)."""
    probe = select.epoll()
    try:
        probe.register(fd, select.EPOLLIN)
    except OSError:
        return False
    finally:
        probe.close()
    return True


class TransportActor(ContractActor):
    """Hosts the configured transport; the only actor besides the broker that holds a secret."""

    def __init__(self) -> None:
        super().__init__()
        self.settings: Settings | None = None
        self.peers: dict[str, Any] = {}
        self.kind = ""
        self.store: Store | None = None
        # console
        self.session: ConsoleSession | None = None
        self.in_fd = self.out_fd = self.done_fd = -1
        self.in_buffer = b""
        self.asked: dict[str, bool] = {}
        self.awaiting = 0  # chat lines typed whose turn has not ended yet
        self.input_closed = False
        # telegram
        self.bridge: AsyncBridge | None = None
        self.telegram: Any = None

    def receiveMsg_Wire(self, msg: Wire, sender: ActorAddress) -> None:
        first = self.settings is None
        self.settings, self.peers, self.kind = msg.settings, msg.peers, msg.transport
        if not first:
            return
        if msg.transport == "console":
            self.store = Store(msg.settings.database)
            self._start_console(msg)
            self.send(self.peers["supervisor"], TransportPolling())
        else:
            self._start_telegram(msg.settings)

    # ---------------------------------------------------------------- console

    def _start_console(self, msg: Wire) -> None:
        self.in_fd, self.out_fd, self.done_fd = msg.console_fds
        self.session = ConsoleSession(msg.story, msg.auto_yes)
        if msg.story:
            self._story_next()
        else:
            self._write("shelldon is listening. Type a message (Ctrl-D to quit).\n")
            self._reopen_parked()
        if self.in_fd >= 0 and not (msg.story and msg.auto_yes):
            if _pollable(self.in_fd):
                os.set_blocking(self.in_fd, False)
                self.watch(self.in_fd)
            else:
                # A file or /dev/null as input: epoll refuses it, and reading never blocks, so
                # take it all now (its end is the end of input).
                while self.in_fd >= 0 and self._console_input():
                    pass

    def _reopen_parked(self) -> None:
        """Ask again what an earlier session left undecided (the owner can decide it now)."""
        assert self.store is not None and self.session is not None
        for reopened in reopen_parked(self.store, time.time()):
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

    def _console_handoff(self, event: InboundMessage | Decision) -> None:
        assert self.store is not None
        self.store.put_inbox(encode(event), time.time())
        self.send(self.peers["arbiter"], InboxChanged())

    def _story_next(self) -> None:
        assert self.session is not None
        if self.session.failure:
            return
        line = self.session.next_story_line()
        if line is None:
            self._write("— end of the demo —\n")
            self._finish_console()
            return
        self._write(format_you(line))
        self._console_handoff(InboundMessage(0, 0, line))
        self._arm_step_deadline()

    def _step_budget_s(self) -> float:
        assert self.settings is not None
        limits = self.settings.limits
        return story_step_budget_s(limits.turn_timeout_s, limits.gate_timeout_s)

    def _arm_step_deadline(self) -> None:
        assert self.session is not None
        budget = dt.timedelta(seconds=self._step_budget_s())
        self.wakeupAfter(budget, payload=("story-step", self.session.step))

    def _end_story(self) -> None:
        """The story cannot go on: say why in one line and end the session with status 1."""
        assert self.session is not None
        self._write(f"shelldon: {self.session.failure}\n")
        self._finish_console(failed=True)

    def _finish_console(self, failed: bool = False) -> None:
        if self.done_fd >= 0:
            with contextlib.suppress(OSError):
                os.write(self.done_fd, CONSOLE_FAILED if failed else CONSOLE_DONE)
                os.close(self.done_fd)
            self.done_fd = -1

    def _console_input(self) -> bool:
        """Read what the owner typed; False once the input has ended."""
        assert self.session is not None
        try:
            data = os.read(self.in_fd, 65536)
        except BlockingIOError:
            return True
        if not data:
            self.unwatch(self.in_fd)
            for answer in self.session.close_input():
                self._write("(no input: no)\n")
                self._console_handoff(answer)
            if not self.session.scripted:
                # End of input: let the turns already typed finish (unless one waits for a
                # decision nobody can type now), and give a command's answer a moment.
                self.input_closed = True
                if not self.awaiting or self.session.prompts:
                    self.wakeupAfter(dt.timedelta(seconds=0.3), payload="console-done")
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
                self._console_handoff(event)
        return True

    # ---------------------------------------------------------------- telegram

    def _start_telegram(self, settings: Settings) -> None:
        from shelldon.secrets import SecretMissingError, read_secret
        from shelldon.transport.telegram_link import TelegramLink

        self.bridge = AsyncBridge("telegram")
        self.watch(self.bridge.fileno())
        from shelldon.preflight import EXIT_CONFIG
        from shelldon.transport.telegram import InvalidEndpoint

        # `shelldon run` checked the token before starting; this catches what changed since.
        try:
            token = read_secret("telegram_token", settings.vault)
            self.telegram = TelegramLink(settings, token, self.bridge)
        except (SecretMissingError, InvalidEndpoint) as exc:
            self.send(self.peers["supervisor"], Fatal(str(exc), EXIT_CONFIG))
            return
        self.bridge.submit(self.telegram.run(), "poller")

    def _drain_bridge(self) -> None:
        assert self.bridge is not None
        from shelldon.transport.telegram import TelegramError

        for tag, _value, error in self.bridge.drain():
            if tag == "inbox":
                self.send(self.peers["arbiter"], InboxChanged())
            elif tag == "polling":
                self.send(self.peers["supervisor"], TransportPolling())
            elif error is None:
                continue
            elif tag == "poller":
                if isinstance(error, TelegramError) and error.fatal:
                    # The client has logged it once already; the supervisor stops the service.
                    status = error.exit_status
                else:
                    log.error("telegram_stopped", error=str(error))
                    status = 1
                self.send(self.peers["supervisor"], Fatal(f"telegram: {error}", status))
            else:
                log.warning("telegram_send_failed", what=str(tag), error=str(error))

    # ---------------------------------------------------------------- both

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        if self.bridge is not None and self.bridge.fileno() in msg.ready:
            self._drain_bridge()
        if self.in_fd >= 0 and self.in_fd in msg.ready:
            self._console_input()

    def receiveMsg_Reply(self, msg: Reply, sender: ActorAddress) -> None:
        if self.kind == "console":
            self._write(format_reply(msg.text))
            if msg.kind == TOOL_REFUSED and self.session and self.session.on_tool_refused():
                self._end_story()
        elif self.telegram is not None and self.bridge is not None:
            reply = self.telegram.reply(msg.chat_id, msg.text, msg.markdown_chars)
            self.bridge.submit(reply, ("reply", msg.chat_id))

    def receiveMsg_Typing(self, msg: Typing, sender: ActorAddress) -> None:
        if self.telegram is not None and self.bridge is not None:
            self.bridge.submit(self.telegram.typing(msg.chat_id), ("typing", msg.chat_id))

    def receiveMsg_AskOwner(self, msg: AskOwner, sender: ActorAddress) -> None:
        if self.kind != "console":
            if self.telegram is not None and self.bridge is not None:
                self.bridge.submit(self.telegram.ask(msg), ("ask", msg.turn_id))
            return
        assert self.session is not None
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
            what = call_label(msg.call)
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
            self._console_handoff(answer)
        else:
            self._write("\n".join(lines) + "\n" + INDENT + ASK)

    def receiveMsg_Settle(self, msg: Settle, sender: ActorAddress) -> None:
        if self.kind != "console":
            if self.telegram is not None and self.bridge is not None:
                self.bridge.submit(self.telegram.settle(msg), ("settle", msg.decision.turn_id))
            return
        assert self.session is not None
        self._write(format_reply(msg.outcome))
        if not msg.final:
            return  # queued behind a running turn: the final outcome follows
        self.session.forget(msg.decision.turn_id)
        promotion = self.asked.pop(msg.decision.turn_id, False)
        if self.session.on_settled(promotion, msg.decision.approved is True):
            self._story_next()
        elif self.session.failure:
            self._end_story()

    def receiveMsg_CardExpired(self, msg: CardExpired, sender: ActorAddress) -> None:
        if self.kind != "console":
            if self.telegram is not None and self.bridge is not None:
                self.bridge.submit(self.telegram.expire(msg), ("expire", msg.turn_id))
            return
        if self.session is not None:
            self.session.forget(msg.turn_id)
            self.asked.pop(msg.turn_id, None)
            self._write(format_reply(msg.notice))

    def receiveMsg_Idle(self, msg: Idle, sender: ActorAddress) -> None:
        if self.session is None:
            return
        self.awaiting = max(0, self.awaiting - 1)
        if self.input_closed and not self.awaiting:
            self._finish_console()
            return
        if self.session.on_idle():
            self._story_next()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        if msg.payload == "console-done":
            self._finish_console()
        elif isinstance(msg.payload, tuple) and msg.payload[:1] == ("story-step",):
            assert self.session is not None
            step = msg.payload[1]
            if self.session.on_step_overdue(step, self._step_budget_s()):
                self._end_story()
            elif step == self.session.step and self.session.waiting_for:
                self._arm_step_deadline()  # the owner is being asked: wait for them

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        if self.bridge is not None:
            if self.telegram is not None:
                with contextlib.suppress(Exception):
                    self.bridge.submit(self.telegram.close(), "close").result(2)
            self.bridge.close()
            self.bridge = None
