"""Importing archived tools: each one is staged, gated by real pytest and put to the owner, as a
promotion proposed by the model would be. Every decision is audited with the code's hash.

The owner is asked through ``ask(tool, report) -> bool`` (the terminal's ``[y/N]`` prompt, or
``--yes``); only a tool whose gate passed is ever put to the owner. A tool already live with
the same code is left as it is; one live with other code (or quarantined) is refused unless
``replace`` — a replacement also resets the old code's strikes. So is a name that is staged
(a model's proposal awaiting the owner): importing would overwrite it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import structlog

from shelldon.toolbox.archive import ArchivedTool
from shelldon.toolbox.gate import GateReport
from shelldon.toolbox.toolbox import Toolbox, ToolboxError

log = structlog.get_logger(__name__)

Ask = Callable[[ArchivedTool, GateReport], bool]


class Outcome(Enum):
    """How importing one tool ended."""

    PROMOTED = "promoted"
    UNCHANGED = "unchanged"
    DECLINED = "declined"
    GATE_FAILED = "gate_failed"
    REFUSED = "refused"

    @property
    def failed(self) -> bool:
        """True when the import of this tool did not do what was asked (exit status 1)."""
        return self in (Outcome.GATE_FAILED, Outcome.REFUSED)


@dataclass(frozen=True, slots=True)
class ImportResult:
    """One tool's import: what happened and a sentence a person can act on."""

    name: str
    outcome: Outcome
    message: str
    code_hash: str


def gate_summary(report: GateReport) -> str:
    """One paragraph about how the gate went: the verdict, every finding, dynamic imports."""
    head = (
        f"gate passed: {report.tests_passed} test(s) in {report.duration_s:.1f} s"
        if report.passed
        else f"gate failed after {report.duration_s:.1f} s"
    )
    parts = [head, *(f"  - {f}" for f in report.findings)]
    if report.dynamic_imports:
        parts.append("  unverifiable dynamic imports: " + ", ".join(report.dynamic_imports))
    return "\n".join(parts)


@dataclass(frozen=True, slots=True)
class _Importer:
    """Imports tools one by one into one toolbox, auditing into its store."""

    selfcode: Toolbox
    ask: Ask
    replace: bool
    archive: str
    via: str

    def audit(self, actor: str, action: str, tool: ArchivedTool, **detail: object) -> None:
        self.selfcode.store.audit.record(
            actor,
            action,
            tool.name,
            {"via": self.via, "archive": self.archive, **detail},
            time.time(),
            code_hash=tool.code_hash,
        )

    def refuse(self, tool: ArchivedTool, message: str) -> ImportResult:
        self.audit("import", "import_refused", tool, reason=message)
        log.warning("tool_import_refused", tool=tool.name, reason=message)
        return ImportResult(tool.name, Outcome.REFUSED, message, tool.code_hash)

    def import_one(self, tool: ArchivedTool) -> ImportResult:
        name = tool.name
        live_hash = self.selfcode.approved_hash(name) if name in self.selfcode.live() else ""
        if live_hash == tool.code_hash:
            return ImportResult(name, Outcome.UNCHANGED, "already live with the same code", "")
        taken = live_hash or name in self.selfcode.quarantined()
        if taken and not self.replace:
            return self.refuse(
                tool,
                f"another version of {name} is already live; re-run with --replace to replace it"
                if live_hash
                else f"{name} is quarantined here: 'shelldon tools restore {name}' brings it "
                "back, or re-run with --replace to put the archive's version in its place",
            )
        if name in self.selfcode.staged() and not self.replace:
            # The parked proposal would then fail as "already exists": the owner decides.
            return self.refuse(
                tool,
                f"a tool named {name} is staged here (a proposal waiting for your approval); "
                "answer it first, or re-run with --replace to put the archive's version in "
                "its place",
            )
        if not tool.test:
            return self.refuse(
                tool,
                "the archive carries no test for it, and the gate needs one; "
                "export it again from a device where it was promoted with its test",
            )
        try:
            staged = self.selfcode.stage(name, tool.code, tool.test, replace=bool(taken))
        except ToolboxError as exc:
            return self.refuse(tool, str(exc))
        report = self.selfcode.run_gate(staged)
        self.audit(
            "gate", "passed" if report.passed else "failed", tool, findings=list(report.findings)
        )
        if not report.passed:
            return ImportResult(name, Outcome.GATE_FAILED, gate_summary(report), tool.code_hash)
        if not self.ask(tool, report):
            self.audit("owner", "discarded", tool)
            return ImportResult(name, Outcome.DECLINED, "not added (your answer)", tool.code_hash)
        try:
            # The bytes the gate passed (held in memory), never a file from its staging dir.
            self.selfcode.promote(
                name,
                staged.code,
                staged.test,
                replace=bool(taken),
                expected_hash=tool.code_hash,
            )
        except ToolboxError as exc:
            self.audit("owner", "promote_failed", tool, error=str(exc))
            return ImportResult(name, Outcome.REFUSED, str(exc), tool.code_hash)
        if taken:
            self.selfcode.store.tools.reset_strikes(name)
        self.audit("owner", "promoted", tool, replaced=bool(taken))
        log.info("tool_imported", tool=name, code_hash=tool.code_hash, replaced=bool(taken))
        what = "replaced the old version; it is live" if taken else "live"
        return ImportResult(name, Outcome.PROMOTED, what, tool.code_hash)


def import_tools(
    tools: tuple[ArchivedTool, ...],
    selfcode: Toolbox,
    ask: Ask,
    *,
    replace: bool = False,
    archive: Path = Path("-"),
    on_result: Callable[[ImportResult], None] | None = None,
    via: str = "import",
) -> tuple[ImportResult, ...]:
    """Stage, gate, ask and promote (or discard) each tool in turn; ``on_result`` hears each
    outcome as soon as it is known; ``via`` says in the audit log what brought them in."""
    importer = _Importer(selfcode, ask, replace, str(archive), via)
    results: list[ImportResult] = []
    for tool in tools:
        result = importer.import_one(tool)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return tuple(results)
