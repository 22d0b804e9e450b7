"""``shelldon backup FILE`` and ``shelldon restore FILE`` at the terminal.

Exit status: 0 when everything asked for was done (a tool the owner declined is the owner's
answer, not a failure); 1 when the backup or the restore was refused (with a line saying why
and what to do, the home as it was) or a tool could not be restored (failed its gate, refused:
the rest is restored and the tool named); 2 for a usage error.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from shelldon.backup.layout import BackupError
from shelldon.backup.reader import Unpacked
from shelldon.backup.restore import RESTORED_CONFIG, restore_backup
from shelldon.backup.writer import write_backup
from shelldon.cli.tools import (
    accept_all,
    os_error_text,
    printable,
    read_yes,
    say_result,
    terminal_ask,
)
from shelldon.config import Settings
from shelldon.store import StoreError
from shelldon.toolbox.archive import ArchivedTool
from shelldon.toolbox.gate import GateReport
from shelldon.toolbox.importer import ImportResult, Outcome


def run_backup(settings: Settings, file: str, force: bool, out: TextIO, err: TextIO) -> int:
    """Write the backup; returns the exit status."""
    try:
        report = write_backup(settings, Path(file), overwrite=force)
    except (BackupError, StoreError) as exc:
        err.write(f"shelldon backup: {exc}\n")
        return 1
    except OSError as exc:
        err.write(f"shelldon backup: {os_error_text(exc)}\n")
        return 1
    tools = ", ".join(report.tools) or "none"
    out.write(
        f"backed up {settings.home} to {report.path} ({report.size} bytes): the database "
        f"(schema v{report.schema_version}), {len(report.tools)} live tool(s) ({tools}), "
        f"{len(report.quarantined)} quarantined, {report.workspace_files} workspace file(s)"
        f"{', the config' if report.config else ''}; never the vault\n"
    )
    if report.tools_left_out:
        out.write(
            "left out, not the code you approved (tampered or broken): "
            f"{', '.join(report.tools_left_out)}\n"
        )
    for line in report.left_out[:20]:
        out.write(f"left out of the workspace: {printable(line)}\n")
    if len(report.left_out) > 20:
        out.write(f"... and {len(report.left_out) - 20} more left out\n")
    return 0


def _ask_config(inp: TextIO, out: TextIO, yes: bool) -> Callable[[str], bool]:
    def ask(endpoints: str) -> bool:
        out.write(f"\nThe backup's config: {printable(endpoints)}.\n")
        if yes:
            out.write("Using it as config.toml (--yes)\n")
            return True
        out.write(f"Use it as config.toml (no: it is kept as {RESTORED_CONFIG} to read)? [y/N] ")
        return read_yes(inp, out)

    return ask


def _ask_tool(
    inp: TextIO, out: TextIO, yes: bool, quarantined: set[str]
) -> Callable[[ArchivedTool, GateReport], bool]:
    inner = accept_all(out) if yes else terminal_ask(inp, out)

    def ask(tool: ArchivedTool, report: GateReport) -> bool:
        if tool.name in quarantined:
            out.write(f"\n({tool.name} was quarantined in the backup; it goes back there)\n")
        return inner(tool, report)

    return ask


def _say_restored(out: TextIO, quarantined: set[str]) -> Callable[[ImportResult], None]:
    """``tools import``'s line per tool; one that was quarantined is said to be so again."""
    say = say_result(out)

    def restored(result: ImportResult) -> None:
        if result.name in quarantined and result.outcome is Outcome.PROMOTED:
            result = dataclasses.replace(
                result,
                message="back in quarantine, as in the backup "
                f"('shelldon tools restore {result.name}' brings it back)",
            )
        say(result)

    return restored


def _say_checked(out: TextIO, unpacked: Unpacked) -> None:
    made = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(unpacked.created_at))
    out.write(
        f"checked: a backup made {made} by shelldon {printable(unpacked.shelldon_version)}: "
        f"database schema v{unpacked.schema_version}, {len(unpacked.tools)} tool(s), "
        f"{unpacked.workspace_files} workspace file(s)"
        f"{', a config' if unpacked.has_config else ''}\n"
    )
    if unpacked.tools:
        out.write("each tool is gated again (real pytest) and put to you\n")
    out.flush()


def run_restore(
    settings: Settings,
    file: str,
    *,
    force: bool,
    yes: bool,
    inp: TextIO,
    out: TextIO,
    err: TextIO,
) -> int:
    """Restore the backup; returns the exit status."""
    quarantined: set[str] = set()

    def checked(unpacked: Unpacked) -> None:
        quarantined.update(name for name, _reason in unpacked.quarantined)
        _say_checked(out, unpacked)

    try:
        report = restore_backup(
            settings,
            Path(file),
            _ask_tool(inp, out, yes, quarantined),
            _ask_config(inp, out, yes),
            force=force,
            on_checked=checked,
            on_result=_say_restored(out, quarantined),
        )
    except (BackupError, StoreError) as exc:
        err.write(f"shelldon restore: {exc}; nothing was restored\n")
        return 1
    except sqlite3.Error as exc:  # the backup's database, checked, still refused a write
        err.write(f"shelldon restore: the backup's database: {exc}; nothing was restored\n")
        return 1
    except OSError as exc:
        err.write(f"shelldon restore: {os_error_text(exc)}; nothing was restored\n")
        return 1
    failed = [r.name for r in report.results if r.outcome.failed]
    added = [r.name for r in report.results if r.outcome is Outcome.PROMOTED]
    gone = report.distrusted
    schema = f"v{report.backup.schema_version}"
    if report.schema_version != report.backup.schema_version:
        schema += f", migrated to v{report.schema_version}"
    back = f" ({len(report.requarantined)} back in quarantine)" if report.requarantined else ""
    out.write(
        f"restored into {settings.home}: conversation, facts, schedule and audit (schema "
        f"{schema}), {report.backup.workspace_files} workspace file(s), "
        f"{len(added)} of {len(report.results)} tool(s){back}\n"
    )
    if gone.approvals or gone.promotions or gone.inbox:
        out.write(
            f"not carried over: {gone.approvals} parked approval(s), {gone.promotions} parked "
            f"promotion(s), {gone.inbox} unanswered message(s): they belong to the old device\n"
        )
    if report.config == RESTORED_CONFIG:
        out.write(
            f"the backup's config is in {settings.home / RESTORED_CONFIG}: read it, and use "
            "what you want of it in your config\n"
        )
    elif report.config:
        out.write(f"the backup's config is now {settings.home / report.config}\n")
    if report.set_aside:
        out.write(
            "an old toolbox in the workspace was set aside, not carried over: "
            f"{', '.join(report.set_aside)} (in workspace/tools-unapproved/)\n"
        )
    if report.kept_toolbox is not None:
        out.write(
            f"the tools not restored are kept in {report.kept_toolbox}: "
            f"'shelldon tools import {report.kept_toolbox}' offers them again\n"
        )
    if report.replaced is not None:
        out.write(f"the pet that was here is in {report.replaced}\n")
    if not (settings.vault.is_dir() and any(settings.vault.iterdir())):
        out.write(
            f"secrets are never in a backup: put them in {settings.vault}/ (or the service's "
            "credentials) again\n"
        )
    if failed:
        out.write(f"not restored: {', '.join(failed)}\n")
    return 1 if failed else 0
