"""Moving a toolbox kept in the workspace (by versions before the toolbox left it) into
``<home>/toolbox/``, once, at start-up.

That layout kept live tools in ``<workspace>/tools/`` (plus ``tools-quarantine/``,
``tools-tests/``, ``tools-staging/``), where any FREE tool could write: nothing found there is
trusted for being there. A module is carried over only when it is a regular file with one name
and its bytes hash to the owner's latest promotion of that name in the audit log (what the owner
approved); it is then written fresh into the toolbox, live or quarantined as it was, with its
kept test. A pending promotion parked by that version gets its staged bytes attached only when
they hash to the parked hash. Everything else — a planted module, a tampered one, a link — is
moved to ``<workspace>/tools-unapproved/`` (never discovered; the owner can read it there and
propose it again), and each one is named in the log and in the returned report. The old
directories are gone afterwards, so this runs once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.config import Settings
from shelldon.store import Store
from shelldon.toolbox.manifest import code_hash
from shelldon.toolbox.tool_files import ToolFileError, module_files, read_or_empty, read_tool_bytes
from shelldon.toolbox.toolbox import StemError, Toolbox, ToolboxError, normalize_stem

log = structlog.get_logger(__name__)

LEGACY_DIRS = ("tools", "tools-quarantine", "tools-tests", "tools-staging")
"""The workspace directories the old layout kept the toolbox in."""

UNAPPROVED_DIR = "tools-unapproved"


@dataclass(frozen=True, slots=True)
class LegacyReport:
    """What moving an old toolbox did: tools carried over, files refused (with why), and
    parked promotions whose bytes were kept."""

    carried: tuple[str, ...] = ()
    refused: tuple[tuple[str, str], ...] = ()
    parked: tuple[str, ...] = ()


def legacy_dirs(workspace: Path) -> tuple[Path, ...]:
    """The old toolbox directories that still exist in ``workspace``."""
    return tuple(workspace / d for d in LEGACY_DIRS if (workspace / d).is_dir())


def migrate_legacy_toolbox(workspace: Path, selfcode: Toolbox) -> LegacyReport:
    """Carry the approved tools of an old workspace toolbox into ``selfcode``'s toolbox and
    move everything else aside (see the module docstring); a no-op when there is none."""
    found = legacy_dirs(workspace)
    if not found:
        return LegacyReport()
    store = selfcode.store
    promoted = store.tools.promoted_hashes()
    carried: list[str] = []
    refused: list[tuple[str, str]] = []
    parked = _keep_parked_bytes(workspace / "tools-staging", store)
    for dirname, state in (("tools", "live"), ("tools-quarantine", "quarantined")):
        old = workspace / dirname
        for path in module_files(old):
            why = _carry(path, state, promoted, workspace, selfcode)
            if why:
                refused.append((f"{dirname}/{path.name}", why))
                log.warning("legacy_tool_refused", file=f"{dirname}/{path.name}", why=why)
            else:
                carried.append(path.stem)
                path.unlink()
    _set_aside(workspace, found)
    report = LegacyReport(tuple(carried), tuple(refused), parked)
    log.warning(
        "legacy_toolbox_moved",
        carried=list(report.carried),
        refused=[f for f, _ in report.refused],
        parked=list(report.parked),
        to=str(selfcode.toolbox),
        unapproved=str(workspace / UNAPPROVED_DIR) if refused else "",
    )
    return report


def _carry(
    path: Path, state: str, promoted: dict[str, str], workspace: Path, selfcode: Toolbox
) -> str:
    """Carry one old module over; "" when done, else why it was refused."""
    stem = path.stem
    try:
        if normalize_stem(stem) != stem:
            return "not a tool name"
    except StemError as exc:
        return str(exc)
    try:
        data = read_tool_bytes(path)
    except ToolFileError as exc:
        return str(exc)
    digest = code_hash(data)
    if selfcode.store.tools.approval(stem) is not None:
        return "a tool of that name is in the toolbox already"
    if stem not in promoted:
        return "the audit log has no promotion of it by the owner"
    if promoted[stem] != digest:
        return "its code is not what the owner approved (the audit log has another hash)"
    test = read_or_empty(workspace / "tools-tests" / f"test_{stem}.py")
    reason = read_or_empty(workspace / "tools-quarantine" / f"{stem}.reason")
    try:
        selfcode.promote(stem, data, test, expected_hash=digest)
        if state == "quarantined":
            selfcode.quarantine(stem, reason.decode("utf-8", "replace") or "quarantined before")
    except ToolboxError as exc:
        return str(exc)
    selfcode.store.audit.record(
        "migration",
        "carried_over",
        stem,
        {"from": str(path), "state": state},
        time.time(),
        code_hash=digest,
    )
    return ""


def _keep_parked_bytes(staging: Path, store: Store) -> tuple[str, ...]:
    """Attach the old staged bytes to the promotions parked without them, when they hash to
    the parked hash; names of the promotions that got them."""
    kept: list[str] = []
    for turn_id, name, digest in store.parked.promotions_without_code():
        try:
            data = read_tool_bytes(staging / f"{name}.py")
        except ToolFileError:
            continue
        if code_hash(data) != digest:
            continue
        test = read_or_empty(staging / f"test_{name}.py")
        if store.parked.keep_promotion_code(turn_id, data, test):
            kept.append(name)
    return tuple(kept)


def _set_aside(workspace: Path, old_dirs: tuple[Path, ...]) -> None:
    """Remove the old directories; the refused modules left in ``tools/`` and
    ``tools-quarantine/`` go to ``tools-unapproved/`` (the rest are copies of what the toolbox
    and the store hold now)."""
    for old in old_dirs:
        with contextlib.suppress(FileNotFoundError):
            (old / "manifest.json").unlink()
        if old.name in ("tools", "tools-quarantine") and any(old.iterdir()):
            _move_aside(workspace, old)
        else:
            shutil.rmtree(old, ignore_errors=True)


def _move_aside(workspace: Path, old: Path) -> None:
    aside = workspace / UNAPPROVED_DIR
    aside.mkdir(mode=0o700, exist_ok=True)
    target = aside / old.name
    if os.path.lexists(target):
        target = aside / f"{old.name}-{int(time.time())}"
    os.replace(old, target)


def set_aside_restored(workspace: Path) -> tuple[str, ...]:
    """Move an old toolbox found in a restored workspace to ``tools-unapproved/`` whole,
    carrying nothing over: the audit log that would vouch for its tools came in the same
    backup, so it vouches for nothing. Returns the names of the directories moved."""
    found = legacy_dirs(workspace)
    for old in found:
        _move_aside(workspace, old)
    return tuple(old.name for old in found)


def prepare_toolbox(settings: Settings) -> LegacyReport:
    """At service start, before the zygote: the toolbox exists, an old one in the workspace is
    moved into it, and the manifest is rewritten from the store (``Toolbox.reconcile``)."""
    with Store(settings.database) as store:
        selfcode = Toolbox.from_settings(settings, store)
        report = migrate_legacy_toolbox(settings.workspace, selfcode)
        selfcode.reconcile()
    return report
