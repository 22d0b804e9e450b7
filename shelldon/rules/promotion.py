"""The promotion rules, as plain functions: a gate's verdict in, the effects to carry out back.

A passing tool is parked for the owner's tap with the bytes the gate judged; a failing one is
told (and recorded, so the model learns why) and, while its repair rounds last, parked as a
"Try to fix" offer. A tap on a parked promotion promotes or discards exactly what was parked.
The GateRunnerActor reads and writes; these functions only decide.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Protocol

from shelldon.config import LimitsSettings
from shelldon.contracts import Decision, ProposeTool
from shelldon.rules.effects import AskOwner, RecordReply, SettleTap
from shelldon.rules.repair import capped_report, offers_repair
from shelldon.store.rows import ParkedPromotion, RepairOffer
from shelldon.toolbox.convention import read_declaration
from shelldon.toolbox.diff import replacement_diff, replaces_line

PROMOTION_EXPIRED = "That request expired."
OUTPUT_CHARS = 1500
"""How much of a failed gate's output the owner is shown (its end: pytest's failures)."""


class Report(Protocol):
    """What the rules read of a gate's report (``toolbox.gate.GateReport``)."""

    @property
    def passed(self) -> bool: ...
    @property
    def unavailable(self) -> bool: ...
    @property
    def findings(self) -> tuple[str, ...]: ...
    @property
    def dynamic_imports(self) -> tuple[str, ...]: ...
    @property
    def tests_passed(self) -> int: ...
    @property
    def duration_s(self) -> float: ...
    @property
    def output(self) -> str: ...


class Judged(Protocol):
    """The bytes a gate judged (``toolbox.toolbox.Staged``)."""

    @property
    def name(self) -> str: ...
    @property
    def code_hash(self) -> str: ...
    @property
    def code(self) -> bytes: ...
    @property
    def test(self) -> bytes: ...


class Replaced(Judged, Protocol):
    """The live version a proposal replaces (``toolbox.toolbox.LiveSource``)."""

    @property
    def approved_at(self) -> float: ...
    @property
    def state(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposed tool on its way through the gate: its id (``turn_id``), chat and round."""

    turn_id: str
    chat_id: int
    proposal: ProposeTool
    round: int


@dataclass(frozen=True, slots=True)
class Audit:
    """Append one entry to the audit log, written by ``actor``."""

    actor: str
    action: str
    subject: str
    detail: tuple[tuple[str, object], ...] = ()
    code_hash: str = ""
    turn_id: str = ""


@dataclass(frozen=True, slots=True)
class ParkPromotion:
    """Park a passing tool, with the bytes the gate judged, until the owner taps; then ``ask``."""

    turn_id: str
    chat_id: int
    name: str
    code_hash: str
    summary: str
    ttl_s: float
    code: bytes
    test: bytes
    replaces_hash: str
    ask: AskOwner


@dataclass(frozen=True, slots=True)
class ParkRepair:
    """Park a failed gate's "Try to fix" offer until the owner taps; then ``ask``."""

    offer: RepairOffer
    summary: str
    ttl_s: float
    ask: AskOwner


@dataclass(frozen=True, slots=True)
class Refuse:
    """Tell the owner a proposed tool goes no further (``output``: the gate's, appended)."""

    chat_id: int
    text: str
    output: str = ""


@dataclass(frozen=True, slots=True)
class Promote:
    """Write the parked bytes into the toolbox; ``promoted`` says what follows."""

    name: str
    code: bytes
    test: bytes
    code_hash: str
    replaces_hash: str
    turn_id: str


@dataclass(frozen=True, slots=True)
class ResetStrikes:
    """Clear a tool's strikes (they were an older version's)."""

    name: str


Effect = (
    Audit | ParkPromotion | ParkRepair | RecordReply | Refuse | Promote | ResetStrikes | SettleTap
)


def tool_description(code: str) -> str:
    """The module's DESCRIPTION, read by AST (never imported); empty when it has none."""
    try:
        declaration, _problems = read_declaration(ast.parse(code))
    except (SyntaxError, ValueError):
        return ""
    return declaration.description if declaration else ""


def gate_summary(report: Report) -> str:
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


def gated(
    job: Proposal,
    judged: Judged,
    base: Replaced | None,
    report: Report,
    limits: LimitsSettings,
) -> list[Effect]:
    """A gate finished: audit its verdict, then park the tool for the owner's tap, or say why
    it failed and (while its repair rounds last) offer to fix it."""
    summary, name, digest = gate_summary(report), judged.name, judged.code_hash
    verdict = "passed" if report.passed else "failed"
    detail = (("findings", list(report.findings)), ("round", job.round))
    audit = Audit("gate", verdict, name, detail, digest, job.turn_id)
    if not report.passed:
        return [audit, *_failed(job, judged, report, summary, limits)]
    if base is None:
        text = f"I wrote a tool called {name} and it passed its test — add it to my toolbox?"
        replaces = diff = ""
    else:
        text = f"I wrote a new version of {name} and it passed its test — replace the live one?"
        replaces = replaces_line(name, base.approved_at, base.state)
        diff = replacement_diff(name, base.code, base.test, judged.code, judged.test)
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
    park = ParkPromotion(
        job.turn_id,
        job.chat_id,
        name,
        digest,
        f"tool {name}" + (" (new version)" if base else ""),
        limits.approval_ttl_s,
        # The bytes the gate judged: promotion writes these, never a file from staging.
        judged.code,
        judged.test,
        base.code_hash if base else "",
        ask,
    )
    return [audit, park]


def _failed(
    job: Proposal, judged: Judged, report: Report, summary: str, limits: LimitsSettings
) -> list[Effect]:
    name = judged.name
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
    record = RecordReply(job.chat_id, text)
    if not repairable:
        return [record, Refuse(job.chat_id, text, report.output[-OUTPUT_CHARS:])]
    offer = RepairOffer(
        offer_id=job.turn_id,
        chat_id=job.chat_id,
        name=name,
        round=job.round,
        code=judged.code,
        test=judged.test,
        replaces=job.proposal.replaces,
        report=capped_report(summary, report.output, limits.repair_report_chars),
    )
    ask = AskOwner(
        job.chat_id,
        job.turn_id,
        text,
        proposal=job.proposal,
        gate_summary=summary,
        failed=True,
        output=report.output[-OUTPUT_CHARS:],
    )
    return [record, ParkRepair(offer, f"tool {name}", limits.approval_ttl_s, ask)]


def promotion_taken(decision: Decision, taken: ParkedPromotion) -> list[Effect]:
    """The owner tapped a promotion and its row was taken (``taken.status`` "ok"), or was gone:
    promote exactly the parked bytes, or discard them."""
    if taken.status != "ok":
        return [SettleTap(decision, PROMOTION_EXPIRED)]
    name, digest = taken.name, taken.code_hash
    if decision.approved:
        return [
            Promote(name, taken.code, taken.test, digest, taken.replaces_hash, decision.turn_id)
        ]
    # Nothing to delete: the parked bytes went with the row, the gate's dir with the gate.
    return [
        Audit("owner", "discarded", name, (), digest, decision.turn_id),
        SettleTap(decision, f"❌ Discarded {name}."),
    ]


def promoted(decision: Decision, promote: Promote, error: str = "") -> list[Effect]:
    """The toolbox took the parked bytes (``error`` empty) or refused them: audit, tell the
    owner, and let the model know next turn that the tool is live."""
    name, digest, turn_id = promote.name, promote.code_hash, decision.turn_id
    if error:
        return [
            Audit("owner", "promote_failed", name, (("error", error),), digest, turn_id),
            SettleTap(decision, f"Could not add {name}: {error}"),
        ]
    replacing = bool(promote.replaces_hash)
    detail = (("replaced", promote.replaces_hash),) if replacing else ()
    effects: list[Effect] = [Audit("owner", "promoted", name, detail, digest, turn_id)]
    if replacing:
        effects.append(ResetStrikes(name))  # the strikes were the old code's
    what = "new version of" if replacing else "new tool"
    outcome = (
        f"✅ Replaced {name} — the new version is live from your next message."
        if replacing
        else f"✅ Added {name} — it's live from your next message."
    )
    record = RecordReply(decision.chat_id, f"(The owner approved my {what} {name}; it is live.)")
    return [*effects, record, SettleTap(decision, outcome)]
