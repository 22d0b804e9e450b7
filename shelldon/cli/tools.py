"""``shelldon tools``: list, show, restore, remove, export and import self-coded tools.

LLM-free and service-free: reads and moves through ``Toolbox`` and the store (an old toolbox
still in the workspace is moved first, as at service start). Exit status: 0 when all was done,
1 when something failed (saying what to do), 2 for a usage error such as a malformed name.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from shelldon.cli.logfile import log_to_home_file
from shelldon.config import Settings, load_settings
from shelldon.owner_commands import restore_tool, retire_tool
from shelldon.store import Store, StoreError
from shelldon.toolbox.archive import ArchivedTool, ArchiveError, export_toolbox, read_archive
from shelldon.toolbox.diff import replacement_diff, replaces_line
from shelldon.toolbox.gate import GateReport
from shelldon.toolbox.importer import Ask, ImportResult, Outcome, gate_summary, import_tools
from shelldon.toolbox.legacy import migrate_legacy_toolbox
from shelldon.toolbox.manifest import BrokenModule, describe_source
from shelldon.toolbox.tool_files import read_or_empty
from shelldon.toolbox.toolbox import StemError, Toolbox, normalize_stem


@dataclass(frozen=True, slots=True)
class ToolRow:
    """One self-coded tool as the owner sees it: where it is, its strikes, why it was pulled."""

    name: str
    state: str
    strikes: int = 0
    last_error: str = ""
    reason: str = ""


def tool_rows(store: Store, selfcode: Toolbox) -> tuple[ToolRow, ...]:
    """Every self-coded tool: live, then staged (awaiting approval), then quarantined, then
    every toolbox file that will not run because it is not what the owner approved."""
    health = {h.name: h for h in store.tools.health()}
    tampered = selfcode.tampered()
    bad = {t.name for t in tampered if t.state != "unapproved"}
    rows: list[ToolRow] = []
    for state, names in (
        ("live", selfcode.live()),
        ("staged", selfcode.staged()),
        ("quarantined", selfcode.quarantined()),
    ):
        for name in names:
            if name in bad and state != "staged":
                continue
            h = health.get(name)
            reason = selfcode.quarantine_reason(name) if state == "quarantined" else ""
            rows.append(
                ToolRow(name, state, h.strikes if h else 0, h.last_error if h else "", reason)
            )
    for t in tampered:
        h = health.get(t.name)
        note = f"not run: {t.problem}" + (" (was quarantined)" if t.state == "quarantined" else "")
        rows.append(ToolRow(t.name, "tampered", h.strikes if h else 0, "", note))
    return tuple(rows)


def list_text(rows: tuple[ToolRow, ...]) -> str:
    """The rows as a table for the terminal, with a hint for restoring quarantined ones."""
    if not rows:
        return "No self-coded tools yet."
    width = max(len(r.name) for r in rows)
    lines = [f"{'NAME':<{width}}  {'STATE':<11}  STRIKES  NOTE"]
    for r in rows:
        # Strike errors and reasons quote the tool's own exceptions: shown escaped.
        note = printable(r.reason or r.last_error)
        if r.state == "staged":
            note = "waiting for the owner's approval"
        lines.append(f"{r.name:<{width}}  {r.state:<11}  {r.strikes:>7}  {note[:80]}".rstrip())
    if any(r.state == "quarantined" for r in rows):
        lines.append("Bring a quarantined tool back with: shelldon tools restore NAME")
    if any(r.state == "tampered" for r in rows):
        lines.append(
            "A tampered tool never runs: its file is not the code you approved. "
            "Propose it again to change it."
        )
    return "\n".join(lines)


class ToolNotFound(LookupError):
    """No self-coded tool has that name."""


def show_text(store: Store, selfcode: Toolbox, name: str) -> str:
    """Everything about tool ``name`` (live, else quarantined, else staged): description,
    schema, code hash, strikes, and its code. Raises ``StemError`` or ``ToolNotFound``."""
    stem = normalize_stem(name)
    approved = store.tools.approval(stem)
    problem = ""
    data = b""
    if approved is not None:
        state = approved.state
        data, problem = selfcode.read_approved(approved)
    elif stem in selfcode.staged():
        state, data = "staged", store.parked.parked_code(stem)
    elif (selfcode.live_dir / f"{stem}.py").exists():
        state, problem = "tampered", "it was never approved"
        data = read_or_empty(selfcode.live_dir / f"{stem}.py")
    else:
        known = ", ".join(r.name for r in tool_rows(store, selfcode)) or "none"
        raise ToolNotFound(f"no self-coded tool named {stem!r} (tools: {known})")
    row = next((r for r in tool_rows(store, selfcode) if r.name == stem), ToolRow(stem, state))
    described = describe_source(stem, f"{stem}.py", data)
    lines = [f"{stem} ({'tampered' if problem else state})"]
    if problem:
        lines.append(f"NOT RUN: {printable(problem)}")
        if approved is not None:
            lines.append(f"approved code hash: sha256:{approved.code_hash}")
    if isinstance(described, BrokenModule):
        lines.append(f"broken: {printable(described.error)}")
    else:
        lines.append(f"description: {printable(described.description)}")
        lines.append(f"code hash: sha256:{described.code_hash}")
    last = f" (last: {printable(row.last_error)})" if row.last_error else ""
    lines.append(f"strikes: {row.strikes}{last}")
    if row.reason and row.state == "quarantined":
        lines.append(f"quarantined because: {printable(row.reason)}")
    kept = selfcode.kept_test(stem)
    lines.append(f"test: {kept}" if kept else "test: none kept (promoted before tests were kept)")
    if not isinstance(described, BrokenModule):
        lines.append("params schema:")
        lines.append(_indent(json.dumps(described.params_schema, indent=2, ensure_ascii=False)))
    lines.append("code:")
    lines.append(_indent(data.decode("utf-8", errors="replace").rstrip("\n")))
    return "\n".join(lines)


def printable(text: str) -> str:
    """``text`` safe to show at a terminal: control, format and bidi characters (ANSI escapes,
    carriage returns, RTL overrides) become visible escapes, so code cannot hide lines from
    the owner who reviews it."""
    return "".join(c if c in "\n\t" or c.isprintable() else repr(c)[1:-1] for c in text)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" if line else "" for line in printable(text).split("\n"))


def replacement_text(selfcode: Toolbox, tool: ArchivedTool) -> str:
    """The "replaces NAME (live since …)" line and diff, as the Telegram card shows them, for an
    archived tool that would replace an approved one ("" for a new tool)."""
    base = selfcode.live_source(tool.name)
    if base is None:
        return ""
    diff = replacement_diff(tool.name, base.code, base.test, tool.code, tool.test)
    return (
        f"{replaces_line(tool.name, base.approved_at, base.state)}\n{_indent(diff.rstrip(chr(10)))}"
    )


def terminal_ask(inp: TextIO, out: TextIO, selfcode: Toolbox | None = None) -> Ask:
    """Put each passing tool to the owner as a promotion would: description, hash, verdict and
    code (or a replacement's diff), then ``[y/N]`` (end of input means no)."""

    def ask(tool: ArchivedTool, report: GateReport) -> bool:
        change = replacement_text(selfcode, tool) if selfcode is not None else ""
        body = f"{change}\n" if change else f"code:\n{_indent(tool.code.rstrip(chr(10)))}\n"
        question = "Replace the live" if change else "Add"
        out.write(
            f"\n{tool.name}: {printable(tool.description)}\n"
            f"code hash: sha256:{tool.code_hash}\n{printable(gate_summary(report))}\n"
            f"{body}{question} {tool.name} {'with this version' if change else 'to the toolbox'}"
            "? [y/N] "
        )
        return read_yes(inp, out)

    return ask


def os_error_text(exc: OSError) -> str:
    """What went wrong with which file, for one line on the terminal (no traceback)."""
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def read_yes(inp: TextIO, out: TextIO) -> bool:
    """The owner's answer to a ``[y/N]`` just written to ``out``: yes only for y or yes (end
    of input is no); a line the terminal did not echo (piped input) is shown."""
    out.flush()
    answer = inp.readline()
    if not answer or not inp.isatty():
        out.write(answer if answer.endswith("\n") else answer + "\n")
    return answer.strip().lower() in ("y", "yes")


def say_result(out: TextIO) -> Callable[[ImportResult], None]:
    """Tell the owner how importing each tool went, one line each (the gate's findings below)."""
    marks = {
        Outcome.PROMOTED: "added",
        Outcome.UNCHANGED: "kept",
        Outcome.DECLINED: "skipped",
        Outcome.GATE_FAILED: "FAILED",
        Outcome.REFUSED: "REFUSED",
    }

    def say(result: ImportResult) -> None:
        first, *rest = printable(result.message).split("\n")
        out.write(f"{marks[result.outcome]} {result.name}: {first}\n")
        for line in rest:
            out.write(f"{line}\n")
        out.flush()

    return say


def accept_all(out: TextIO, selfcode: Toolbox | None = None) -> Ask:
    """The owner's ``--yes``: every tool whose gate passed is accepted, and each is named (a
    replacement of a live tool with what it changes)."""

    def accept(tool: ArchivedTool, report: GateReport) -> bool:
        change = replacement_text(selfcode, tool) if selfcode is not None else ""
        if change:
            out.write(f"{tool.name}: {change}\n")
        out.write(f"{tool.name}: {gate_summary(report).splitlines()[0]}; accepted (--yes)\n")
        return True

    return accept


@dataclass(frozen=True, slots=True)
class ToolsRequest:
    """One ``shelldon tools`` invocation, parsed."""

    action: str = "list"
    name: str = ""
    file: str = ""
    yes: bool = False
    replace: bool = False
    force: bool = False


@dataclass(frozen=True, slots=True)
class Terminal:
    """Where the owner answers (``inp``), reads results (``out``) and reads errors (``err``)."""

    inp: TextIO
    out: TextIO
    err: TextIO


def run_tools(
    settings: Settings, request: ToolsRequest, inp: TextIO, out: TextIO, err: TextIO
) -> int:
    """Carry out ``request`` against ``settings``' home; returns the exit status."""
    action = _ACTIONS[request.action]
    try:
        # The service's gate containment: an imported tool is trusted no more than a proposed one.
        with Store(settings.database) as store:
            selfcode = Toolbox.from_settings(settings, store)
            migrate_legacy_toolbox(settings.workspace, selfcode)
            return action(request, selfcode, store, Terminal(inp, out, err))
    except StemError as exc:
        err.write(f"shelldon tools: {exc}\n")
        return 2
    except (ToolNotFound, ArchiveError, StoreError) as exc:
        err.write(f"shelldon tools: {exc}\n")
        return 1
    except OSError as exc:
        err.write(f"shelldon tools: {os_error_text(exc)}\n")
        return 1


def _list(request: ToolsRequest, selfcode: Toolbox, store: Store, term: Terminal) -> int:
    term.out.write(list_text(tool_rows(store, selfcode)) + "\n")
    return 0


def _show(request: ToolsRequest, selfcode: Toolbox, store: Store, term: Terminal) -> int:
    term.out.write(show_text(store, selfcode, request.name) + "\n")
    return 0


def _restore(request: ToolsRequest, selfcode: Toolbox, store: Store, term: Terminal) -> int:
    stem = normalize_stem(request.name)
    if stem not in selfcode.quarantined():
        quarantined = ", ".join(selfcode.quarantined()) or "none"
        term.err.write(
            f"shelldon tools: {stem} is not quarantined, so there is nothing to restore "
            f"(quarantined: {quarantined})\n"
        )
        return 1
    # The owner's /restore, word for word: strikes reset and audited in one place.
    text = restore_tool(store, selfcode, stem, time.time())
    restored = stem in selfcode.live() and stem not in selfcode.quarantined()
    (term.out if restored else term.err).write(text + "\n")
    return 0 if restored else 1


def _remove(request: ToolsRequest, selfcode: Toolbox, store: Store, term: Terminal) -> int:
    stem = normalize_stem(request.name)
    if store.tools.approval(stem) is None:
        known = ", ".join((*selfcode.live(), *selfcode.quarantined())) or "none"
        term.err.write(f"shelldon tools: no live or quarantined tool named {stem} ({known})\n")
        return 1
    # The owner's /retire, word for word: archived and audited in one place.
    text = retire_tool(store, selfcode, stem, time.time(), via="cli")
    removed = store.tools.approval(stem) is None
    (term.out if removed else term.err).write(text + "\n")
    return 0 if removed else 1


def _export(request: ToolsRequest, selfcode: Toolbox, store: Store, term: Terminal) -> int:
    report = export_toolbox(selfcode, Path(request.file), overwrite=request.force)
    names = ", ".join(report.exported) or "none"
    term.out.write(f"exported {len(report.exported)} tool(s) to {report.path}: {names}\n")
    if report.without_test:
        missing = ", ".join(report.without_test)
        term.out.write(f"without a test (an import will refuse these): {missing}\n")
    if report.skipped_broken:
        term.out.write(f"left out, broken: {', '.join(report.skipped_broken)}\n")
    if report.skipped_tampered:
        term.out.write(
            f"left out, not the code you approved (tampered): "
            f"{', '.join(report.skipped_tampered)}\n"
        )
    return 0


def _import(request: ToolsRequest, selfcode: Toolbox, store: Store, term: Terminal) -> int:
    path = Path(request.file)
    tools = read_archive(path)
    if not tools:
        term.out.write(f"{path} holds no tools; nothing to import\n")
        return 0
    term.out.write(f"{path}: {len(tools)} tool(s): {', '.join(t.name for t in tools)}\n")
    if request.yes:
        ask = accept_all(term.out, selfcode)
    else:
        ask = terminal_ask(term.inp, term.out, selfcode)
    results = import_tools(
        tools,
        selfcode,
        ask,
        replace=request.replace,
        archive=path.absolute(),
        on_result=say_result(term.out),
    )
    failed = [r.name for r in results if r.outcome.failed]
    counts = {o: sum(r.outcome is o for r in results) for o in Outcome}
    term.out.write(
        f"{len(tools)} tool(s): {counts[Outcome.PROMOTED]} added, "
        f"{counts[Outcome.UNCHANGED]} already live, {counts[Outcome.DECLINED]} declined, "
        f"{len(failed)} failed" + (f" ({', '.join(failed)})\n" if failed else "\n")
    )
    return 1 if failed else 0


_ACTIONS: dict[str, Callable[[ToolsRequest, Toolbox, Store, Terminal], int]] = {
    "list": _list,
    "show": _show,
    "restore": _restore,
    "remove": _remove,
    "export": _export,
    "import": _import,
}


def cmd_tools(args: argparse.Namespace) -> int:
    """List, show, restore, remove, export or import self-coded tools (``shelldon.toolbox``)."""
    settings = load_settings(args.config)
    # Keep the terminal for the answers and the [y/N] prompts; events go to the log file.
    log_to_home_file(settings)
    request = ToolsRequest(
        action=args.tools_command or "list",
        name=getattr(args, "name", ""),
        file=getattr(args, "file", ""),
        yes=getattr(args, "yes", False),
        replace=getattr(args, "replace", False),
        force=getattr(args, "force", False),
    )
    return run_tools(settings, request, sys.stdin, sys.stdout, sys.stderr)
