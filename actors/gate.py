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
from shelldon.rules.repair import capped_report, offers_repair
from shelldon.store import RepairOffer
from shelldon.toolbox.convention import read_declaration
from shelldon.toolbox.diff import replacement_diff, replaces_line
from shelldon.toolbox.gate import GateReport, GateRun
from shelldon.toolbox.toolbox import LiveSource, Staged, Toolbox, ToolboxError

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
        self.selfcode: Toolbox | None = None
        self.queue: collections.deque[GateTool] = collections.deque()
        self.running: tuple[GateTool, GateRun, Staged, LiveSource | None] | None = None

    def wired(self, msg: Wire, *, first: bool) -> None:
        assert self.store is not None
        self.selfcode = Toolbox.from_settings(msg.settings, self.store)
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
                # A replacement is staged beside the live version, which stays as it is
                # until the owner approves the new bytes.
                base = self.selfcode.replacement_base(p.name, p.replaces)
                staged = self.selfcode.stage(p.name, p.code, p.test, replace=base is not None)
            except ToolboxError as exc:
                text = f"I tried to write a tool called {p.name!r}, but: {exc}"
                self._tell(job.chat_id, text, kind=TOOL_REFUSED)
                continue
            run = self.selfcode.start_gate(staged)
            self.running = (job, run, staged, base)
            if run.fd is not None:
                self.watch(run.fd)
            self.wakeupAfter(dt.timedelta(seconds=0.2), payload=("gate", job.turn_id))
            self._poll()

    def _poll(self) -> None:
        if self.running is None:
            return
        job, run, staged, base = self.running
        fd = run.fd
        report = run.poll()
        if fd is not None and run.fd is None:
            self.unwatch(fd)
        if report is None:
            return
        if fd is not None:
            self.unwatch(fd)
        self.running = None
        self._gated(job, staged, base, report)
        self._next()

    def receiveMsg_WatchMessage(self, msg: WatchMessage, sender: ActorAddress) -> None:
        self._poll()

    def receiveMsg_WakeupMessage(self, msg: WakeupMessage, sender: ActorAddress) -> None:
        self._poll()
        if self.running is not None:
            self.wakeupAfter(dt.timedelta(seconds=0.2), payload=("gate", self.running[0].turn_id))

    def _gated(
        self, job: GateTool, staged: Staged, base: LiveSource | None, report: GateReport
    ) -> None:
        assert self.store is not None and self.settings is not None
        now, summary, limits = time.time(), gate_summary(report), self.settings.limits
        name, digest = staged.name, staged.code_hash
        self.store.audit(
            "gate",
            "passed" if report.passed else "failed",
            name,
            {"findings": list(report.findings), "round": job.round},
            now,
            code_hash=digest,
            turn_id=job.turn_id,
        )
        if not report.passed:
            self._failed(job, staged, report, summary, now)
            return
        self.store.park_promotion(
            job.turn_id,
            job.chat_id,
            name,
            digest,
            f"tool {name}" + (" (new version)" if base else ""),
            now,
            limits.approval_ttl_s,
            # The bytes the gate judged: promotion writes these, never a file from staging.
            code=staged.code,
            test=staged.test,
            replaces_hash=base.code_hash if base else "",
        )
        if base is None:
            text = f"I wrote a tool called {name} and it passed its test — add it to my toolbox?"
            replaces = diff = ""
        else:
            text = f"I wrote a new version of {name} and it passed its test — replace the live one?"
            replaces = replaces_line(name, base.approved_at, base.state)
            diff = replacement_diff(name, base.code, base.test, staged.code, staged.test)
        ask = AskOwner(
            job.chat_id,
            job.turn_id,
            text,
            proposal=job.proposal,
            description=tool_description(job.proposal.code),
            gate_summary=summary,
            replaces=replaces,
            diff=diff,
        )
        self.send(self.peers["transport"], ask)

    def _failed(
        self, job: GateTool, staged: Staged, report: GateReport, summary: str, now: float
    ) -> None:
        assert self.store is not None and self.settings is not None
        name, limits = staged.name, self.settings.limits
        repairable = offers_repair(
            passed=report.passed, unavailable=report.unavailable, round=job.round, limits=limits
        )
        if report.unavailable:
            text = (
                f"I wrote a tool called {name}, but my gate could not test it, so I dropped "
                "it: my install needs fixing, not the tool; ask me again once it is fixed."
                f"\n{summary}"
            )
        elif repairable and job.round:
            text = (
                f"My fix of {name} (repair round {job.round} of {limits.max_repair_rounds}) "
                f"failed its gate too.\n{summary}"
            )
        elif repairable:
            text = f"I wrote a tool called {name}, but it failed its gate.\n{summary}"
        else:
            rounds = f" after {job.round} repair round(s)" if job.round else ""
            text = (
                f"I wrote a tool called {name}, but it failed its gate{rounds}, so I threw "
                f"it away.\n{summary}"
            )
        # The model reads the conversation next turn: it learns why, too.
        self.store.append_message(job.chat_id, "assistant", text, now)
        if not repairable:
            self._tell(job.chat_id, text, pre_output=report.output, kind=TOOL_REFUSED)
            return
        offer = RepairOffer(
            offer_id=job.turn_id,
            chat_id=job.chat_id,
            name=name,
            round=job.round,
            code=staged.code,
            test=staged.test,
            replaces=job.proposal.replaces,
            report=capped_report(summary, report.output, limits.repair_report_chars),
        )
        self.store.park_repair(offer, f"tool {name}", now, limits.approval_ttl_s)
        ask = AskOwner(
            job.chat_id,
            job.turn_id,
            text,
            proposal=job.proposal,
            gate_summary=summary,
            failed=True,
            output=report.output[-1500:],
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
        replacing = bool(taken.replaces_hash)
        if decision.approved:
            try:
                self.selfcode.promote(
                    name,
                    taken.code,
                    taken.test,
                    expected_hash=digest,
                    replace=replacing,
                    replaces_hash=taken.replaces_hash,
                    turn_id=decision.turn_id,
                )
            except ToolboxError as exc:
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
            detail = {"replaced": taken.replaces_hash} if replacing else {}
            self.store.audit(
                "owner", "promoted", name, detail, now, code_hash=digest, turn_id=decision.turn_id
            )
            if replacing:
                # The strikes were the old code's.
                self.store.reset_strikes(name)
            what = "new version of" if replacing else "new tool"
            self.store.append_message(
                decision.chat_id,
                "assistant",
                f"(The owner approved my {what} {name}; it is live.)",
                now,
            )
            outcome = (
                f"✅ Replaced {name} — the new version is live from your next message."
                if replacing
                else f"✅ Added {name} — it's live from your next message."
            )
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
