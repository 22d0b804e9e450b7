"""GateRunnerActor: stages a proposed tool, gates it (AST checks + sandboxed pytest) without
blocking its mailbox, parks a passing tool for the owner's tap, and promotes or discards it."""

from __future__ import annotations

import ast
import collections
import datetime as dt
import time

import structlog
from thespian.actors import ActorAddress, ActorExitRequest, WakeupMessage, WatchMessage

from actors.messages import (
    TOOL_REFUSED,
    AskOwner,
    DecidePromotion,
    GateTool,
    Reply,
    Settle,
    Wire,
)
from actors.wired import WiredActor
from shelldon.core.gate import GateReport, GateRun
from shelldon.core.manifest import read_declaration
from shelldon.core.selfcode import SelfCode, SelfCodeError, Staged

log = structlog.get_logger(__name__)


def tool_description(code: str) -> str:
    """The module's DESCRIPTION, read by AST (never imported); empty when it has none."""
    try:
        declaration, _problems = read_declaration(ast.parse(code))
    except (SyntaxError, ValueError):
        return ""
    return declaration.description if declaration else ""


def gate_summary(report: GateReport) -> str:
    """One paragraph for the owner and the model about how the gate went."""
    head = (
        f"passed: {report.tests_passed} test(s) in {report.duration_s:.1f} s"
        if report.passed
        else f"failed after {report.duration_s:.1f} s"
    )
    parts = [head]
    if report.findings:
        parts.append("findings: " + "; ".join(report.findings))
    if report.dynamic_imports:
        parts.append("unverifiable dynamic imports: " + ", ".join(report.dynamic_imports))
    return "\n".join(parts)


class GateRunnerActor(WiredActor):
    """Runs one gate at a time (the Pi has little memory); queues the rest."""

    def __init__(self) -> None:
        super().__init__()
        self.selfcode: SelfCode | None = None
        self.queue: collections.deque[GateTool] = collections.deque()
        self.running: tuple[GateTool, GateRun, Staged] | None = None

    def wired(self, msg: Wire, *, first: bool) -> None:
        assert self.store is not None
        self.selfcode = SelfCode.from_settings(msg.settings, self.store)
        if first:
            # A gate cut short by a crash left its staging directory; parked promotions keep
            # their bytes in the store, so none is needed.
            self.selfcode.sweep_staging()

    def receiveMsg_GateTool(self, msg: GateTool, sender: ActorAddress) -> None:
        self.queue.append(msg)
        self._next()

    def _next(self) -> None:
        assert self.selfcode is not None
        while self.running is None and self.queue:
            job = self.queue.popleft()
            p = job.proposal
            try:
                staged = self.selfcode.stage(p.name, p.code, p.test)
            except SelfCodeError as exc:
                text = f"I tried to write a tool called {p.name!r}, but: {exc}"
                self._tell(job.chat_id, text, kind=TOOL_REFUSED)
                continue
            run = self.selfcode.start_gate(staged)
            self.running = (job, run, staged)
            if run.fd is not None:
                self.watch(run.fd)
            self.wakeupAfter(dt.timedelta(seconds=0.2), payload=("gate", job.turn_id))
            self._poll()

    def _poll(self) -> None:
        if self.running is None:
            return
        job, run, staged = self.running
        fd = run.fd
        report = run.poll()
        if fd is not None and run.fd is None:
            self.unwatch(fd)
        if report is None:
            return
        if fd is not None:
            self.unwatch(fd)
        self.running = None
        self._gated(job, staged, report)
        self._next()

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        self._poll()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        self._poll()
        if self.running is not None:
            self.wakeupAfter(dt.timedelta(seconds=0.2), payload=("gate", self.running[0].turn_id))

    def _gated(self, job: GateTool, staged: Staged, report: GateReport) -> None:
        assert self.store is not None and self.settings is not None
        now, summary = time.time(), gate_summary(report)
        name, digest = staged.name, staged.code_hash
        self.store.audit(
            "gate",
            "passed" if report.passed else "failed",
            name,
            {"findings": list(report.findings)},
            now,
            code_hash=digest,
            turn_id=job.turn_id,
        )
        if not report.passed:
            if report.unavailable:
                text = (
                    f"I wrote a tool called {name}, but my gate could not test it, so I dropped "
                    "it: my install needs fixing, not the tool; ask me again once it is fixed."
                    f"\n{summary}"
                )
            else:
                text = (
                    f"I wrote a tool called {name}, but it failed its gate, so I threw it away."
                    f"\n{summary}"
                )
            # The model reads the conversation next turn: it learns why, too.
            self.store.append_message(job.chat_id, "assistant", text, now)
            self._tell(job.chat_id, text, pre_output=report.output, kind=TOOL_REFUSED)
            return
        self.store.park_promotion(
            job.turn_id,
            job.chat_id,
            name,
            digest,
            f"tool {name}",
            now,
            self.settings.limits.approval_ttl_s,
            # The bytes the gate judged: promotion writes these, never a file from staging.
            code=staged.code,
            test=staged.test,
        )
        text = f"I wrote a tool called {name} and it passed its test — add it to my toolbox?"
        ask = AskOwner(
            job.chat_id,
            job.turn_id,
            text,
            proposal=job.proposal,
            description=tool_description(job.proposal.code),
            gate_summary=summary,
        )
        self.send(self.peers["transport"], ask)

    def receiveMsg_DecidePromotion(self, msg: DecidePromotion, sender: ActorAddress) -> None:
        assert self.store is not None and self.selfcode is not None
        decision, now = msg.decision, time.time()
        taken = self.store.take_promotion(decision.turn_id, now)
        if taken.status != "ok":
            self.send(self.peers["transport"], Settle(decision, "That request expired."))
            return
        name, _, digest = taken.blob.decode().partition("\0")
        if decision.approved:
            try:
                self.selfcode.promote(
                    name, taken.code, taken.test, expected_hash=digest, turn_id=decision.turn_id
                )
            except SelfCodeError as exc:
                self.store.audit(
                    "owner",
                    "promote_failed",
                    name,
                    {"error": str(exc)},
                    now,
                    code_hash=digest,
                    turn_id=decision.turn_id,
                )
                self.send(self.peers["transport"], Settle(decision, f"Could not add {name}: {exc}"))
                return
            self.store.audit(
                "owner", "promoted", name, {}, now, code_hash=digest, turn_id=decision.turn_id
            )
            self.store.append_message(
                decision.chat_id,
                "assistant",
                f"(The owner approved my new tool {name}; it is live.)",
                now,
            )
            outcome = f"✅ Added {name} — it's live from your next message."
        else:
            # Nothing to delete: the parked bytes went with the row, the gate's dir with the gate.
            self.store.audit(
                "owner", "discarded", name, {}, now, code_hash=digest, turn_id=decision.turn_id
            )
            outcome = f"❌ Discarded {name}."
        self.send(self.peers["transport"], Settle(decision, outcome))

    def receiveMsg_ActorExitRequest(self, msg: ActorExitRequest, sender: ActorAddress) -> None:
        if self.running is not None:
            self.running[1].kill()
            self.running = None

    def _tell(self, chat_id: int, text: str, pre_output: str = "", kind: str = "") -> None:
        if pre_output:
            text = f"{text}\n\n{pre_output[-1500:]}"
        self.send(self.peers["transport"], Reply(chat_id, text, kind=kind))
