"""Self-coded tools on disk: stage, gate, promote, discard, quarantine, restore.

``SelfCode`` is the sole writer of three workspace directories::

    <workspace>/tools/             live: <stem>.py + manifest.json, discovered FREE by workers
    <workspace>/tools-staging/     <stem>.py + test_<stem>.py awaiting the gate and the owner
    <workspace>/tools-quarantine/  <stem>.py (+ <stem>.reason) pulled after repeated failures
    <workspace>/tools-tests/       test_<stem>.py kept at promotion, so an export can carry it

Every move is one ``os.replace`` inside the workspace; every file is written to a temp file,
fsynced and renamed, and the manifest is rewritten the same way after each change to ``tools/``,
so a worker sees the old toolbox or the new one, never half of one.

Names. A proposed name becomes a module stem: NFKC-normalised, a trailing ``.py`` dropped, then
it must be an ASCII identifier of at most 64 characters (Anthropic and OpenAI accept no more,
and ASCII keeps a look-alike like a Cyrillic letter from posing as another tool), with no path
separator, dot or leading underscore (so no dunder), not starting with ``test_`` (the staged
test is ``test_<stem>.py``), and not the name of a standard-library module or of what pytest
imports (the gate runs with the staging dir first on ``sys.path``). A keyword gets ``_tool``
appended (``class`` → ``class_tool``) so it stays importable.

Replacement. A name that is live (or quarantined) is refused unless the caller asks for a
replacement explicitly (``stage(..., replace=True)`` and ``promote(..., replace=True)``): a new
version of a tool the owner already trusts is a decision the owner makes with the new code in
front of them, never a side effect of picking a name twice. Promoting a replacement of a
quarantined tool drops the quarantined copy.

Not thread-safe: one actor owns a ``SelfCode``.
"""

from __future__ import annotations

import contextlib
import keyword
import os
import shutil
import sys
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.config import LimitsSettings, SandboxSettings
from shelldon.core.gate import GateLimits, GateReport, GateRun, start_gate
from shelldon.core.manifest import (
    code_hash,
    fsync_dir,
    module_files,
    rewrite_manifest,
    write_atomic,
)

log = structlog.get_logger(__name__)

__all__ = [
    "MAX_SOURCE_BYTES",
    "GateReport",
    "GateRun",
    "SelfCode",
    "SelfCodeError",
    "Staged",
    "StemError",
    "normalize_stem",
]

MAX_SOURCE_BYTES = 64 * 1024
MAX_STEM_CHARS = 64

# Top-level modules a gate's pytest imports; a staged module of that name would shadow them.
_PYTEST_MODULES = frozenset(
    {
        "pytest",
        "py",
        "pluggy",
        "iniconfig",
        "packaging",
        "pygments",
        "colorama",
        "exceptiongroup",
        "tomli",
        "conftest",
        "setup",
        "site",
        "sitecustomize",
        "usercustomize",
    }
)


class SelfCodeError(ValueError):
    """A self-coding step was refused; the message says why and what to do instead."""


class StemError(SelfCodeError):
    """A proposed tool name cannot become a module stem."""


@dataclass(frozen=True, slots=True)
class Staged:
    """A staged tool: its stem, the name the model asked for, both files and the code's hash."""

    name: str
    requested: str
    tool_path: Path
    test_path: Path
    code_hash: str
    replaces: bool = False


def normalize_stem(name: str) -> str:
    """The module stem for a proposed tool name, or ``StemError`` saying what is wrong with it."""
    stem = unicodedata.normalize("NFKC", name).strip()
    if stem.endswith(".py"):
        stem = stem[:-3]
    shown = repr(name[:80])
    if not stem:
        raise StemError("a tool needs a name: letters, digits and underscores, like word_count")
    if any(sep in stem for sep in ("/", "\\", os.sep, "\0")):
        raise StemError(f"tool name {shown} contains a path separator; use a plain name")
    if "." in stem:
        raise StemError(
            f"tool name {shown} contains a dot; use underscores, like {stem.replace('.', '_')!r}"
        )
    if stem.startswith("_"):
        raise StemError(
            f"tool name {shown} starts with an underscore (private or dunder names are refused)"
        )
    if not stem.isascii():
        raise StemError(
            f"tool name {shown} has non-ASCII characters (they can look like other letters); "
            "use a-z, 0-9 and _"
        )
    if not stem.isidentifier():
        raise StemError(
            f"tool name {shown} is not a Python identifier: start with a letter, then letters, "
            "digits and underscores"
        )
    if keyword.iskeyword(stem):
        stem = f"{stem}_tool"
    if len(stem) > MAX_STEM_CHARS:
        raise StemError(f"tool name {shown} is longer than {MAX_STEM_CHARS} characters")
    if stem.startswith("test_"):
        raise StemError(f"tool name {shown} starts with test_, which is reserved for its test file")
    if stem in sys.stdlib_module_names or stem in _PYTEST_MODULES:
        raise StemError(
            f"tool name {shown} is the name of a Python module the tool's test needs; "
            f"choose another, like {stem + '_tool'!r}"
        )
    return stem


def _stems(directory: Path) -> tuple[str, ...]:
    return tuple(p.stem for p in module_files(directory))


class SelfCode:
    """The workspace's self-coded tool directories and every change made to them."""

    def __init__(
        self,
        workspace: Path,
        limits: LimitsSettings | None = None,
        sandbox: SandboxSettings | None = None,
    ) -> None:
        self.workspace = workspace
        self.gate_limits = GateLimits.from_settings(limits or LimitsSettings(), sandbox)
        self.live_dir = workspace / "tools"
        self.staging_dir = workspace / "tools-staging"
        self.quarantine_dir = workspace / "tools-quarantine"
        self.tests_dir = workspace / "tools-tests"
        for directory in (self.live_dir, self.staging_dir, self.quarantine_dir, self.tests_dir):
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    # listing

    def live(self) -> tuple[str, ...]:
        """Stems of the live tools."""
        return _stems(self.live_dir)

    def staged(self) -> tuple[str, ...]:
        """Stems of staged tools (a module with its test beside it)."""
        return tuple(
            s for s in _stems(self.staging_dir) if (self.staging_dir / f"test_{s}.py").exists()
        )

    def quarantined(self) -> tuple[str, ...]:
        """Stems of quarantined tools."""
        return _stems(self.quarantine_dir)

    def kept_test(self, name: str) -> Path | None:
        """The test tool ``name`` was promoted with, kept for export; None if there is none."""
        path = self.tests_dir / f"test_{normalize_stem(name)}.py"
        return path if path.is_file() else None

    def quarantine_reason(self, name: str) -> str:
        """Why tool ``name`` was quarantined ("" if unknown)."""
        path = self.quarantine_dir / f"{normalize_stem(name)}.reason"
        try:
            return path.read_text(encoding="utf-8")
        except OSError:
            return ""

    # stage and gate

    def stage(self, name: str, code: str, test: str, *, replace: bool = False) -> Staged:
        """Write ``<stem>.py`` and ``test_<stem>.py`` to staging, clearing a stale pair first."""
        stem = normalize_stem(name)
        data = {"code": _encode(code, "code"), "test": _encode(test, "test")}
        for what, blob in data.items():
            if len(blob) > MAX_SOURCE_BYTES:
                raise SelfCodeError(
                    f"the tool's {what} is {len(blob)} bytes; the limit is {MAX_SOURCE_BYTES} "
                    "(64 KB): make it smaller"
                )
        taken = [
            d.name for d in (self.live_dir, self.quarantine_dir) if (d / f"{stem}.py").exists()
        ]
        if taken and not replace:
            raise SelfCodeError(
                f"a tool named {stem!r} already exists (in {', '.join(taken)}); pick another "
                "name, or propose it explicitly as a replacement"
            )
        self._sweep_stale_gate_dirs()
        self.discard(stem)
        tool_path = self.staging_dir / f"{stem}.py"
        test_path = self.staging_dir / f"test_{stem}.py"
        write_atomic(test_path, data["test"])
        write_atomic(tool_path, data["code"])
        staged = Staged(stem, name, tool_path, test_path, code_hash(data["code"]), replace)
        log.info("tool_staged", tool=stem, code_hash=staged.code_hash, replaces=replace)
        return staged

    def start_gate(self, staged: Staged) -> GateRun:
        """Start the gate without waiting (see ``GateRun``); a failed gate discards the pair."""

        def discard_failed(report: GateReport) -> None:
            # Only the pair this gate judged: a newer proposal staged meanwhile is left alone.
            if not report.passed and self._staged_hash(staged.name) == report.code_hash:
                self.discard(staged.name)

        return start_gate(self.staging_dir, staged.name, self.gate_limits, discard_failed)

    def run_gate(self, staged: Staged) -> GateReport:
        """Gate the staged tool and wait for the verdict; a failed gate discards the pair."""
        return self.start_gate(staged).wait()

    # owner decisions

    def promote(self, name: str, *, replace: bool = False, expected_hash: str = "") -> Path:
        """Move the staged module live, keep its test in ``tools-tests/``, rewrite the manifest;
        returns the live path. ``expected_hash`` (the approved code's sha256), when given, must
        still match."""
        stem = normalize_stem(name)
        staged = self.staging_dir / f"{stem}.py"
        try:
            digest = code_hash(staged.read_bytes())
        except FileNotFoundError:
            raise SelfCodeError(f"no staged tool named {stem!r} to promote") from None
        if expected_hash and digest != expected_hash:
            raise SelfCodeError(
                f"the staged {stem!r} is not the code that was approved (hash changed); "
                "propose it again"
            )
        live = self.live_dir / f"{stem}.py"
        quarantined = self.quarantine_dir / f"{stem}.py"
        if not replace and (live.exists() or quarantined.exists()):
            raise SelfCodeError(f"a tool named {stem!r} already exists; promote as a replacement")
        os.replace(staged, live)
        self._keep_test(stem)
        if replace:
            self._drop_quarantined(stem)
        fsync_dir(self.staging_dir)
        fsync_dir(self.live_dir)
        rewrite_manifest(self.live_dir)
        log.info("tool_promoted", tool=stem, code_hash=digest, replaced=replace)
        return live

    def discard(self, name: str) -> bool:
        """Delete the staged pair for ``name``; True if anything was there."""
        stem = normalize_stem(name)
        removed = False
        for path in (self.staging_dir / f"{stem}.py", self.staging_dir / f"test_{stem}.py"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed = True
        if removed:
            log.info("tool_discarded", tool=stem)
        return removed

    # strikes

    def quarantine(self, name: str, reason: str) -> Path:
        """Move live tool ``name`` out of discovery's reach, noting why; rewrites the manifest."""
        stem = normalize_stem(name)
        live = self.live_dir / f"{stem}.py"
        target = self.quarantine_dir / f"{stem}.py"
        if not live.exists():
            raise SelfCodeError(f"no live tool named {stem!r} to quarantine")
        write_atomic(self.quarantine_dir / f"{stem}.reason", reason.encode("utf-8", "replace"))
        os.replace(live, target)
        fsync_dir(self.quarantine_dir)
        fsync_dir(self.live_dir)
        rewrite_manifest(self.live_dir)
        log.warning("tool_quarantined", tool=stem, reason=reason[:200])
        return target

    def restore(self, name: str) -> Path:
        """Move quarantined tool ``name`` back live (the caller resets its strikes)."""
        stem = normalize_stem(name)
        source = self.quarantine_dir / f"{stem}.py"
        live = self.live_dir / f"{stem}.py"
        if not source.exists():
            raise SelfCodeError(f"no quarantined tool named {stem!r} to restore")
        if live.exists():
            raise SelfCodeError(f"a live tool named {stem!r} already exists; it cannot be restored")
        os.replace(source, live)
        with contextlib.suppress(FileNotFoundError):
            (self.quarantine_dir / f"{stem}.reason").unlink()
        fsync_dir(self.quarantine_dir)
        fsync_dir(self.live_dir)
        rewrite_manifest(self.live_dir)
        log.info("tool_restored", tool=stem)
        return live

    # internals

    def _staged_hash(self, stem: str) -> str:
        try:
            return code_hash((self.staging_dir / f"{stem}.py").read_bytes())
        except OSError:
            return ""

    def _keep_test(self, stem: str) -> None:
        kept = self.tests_dir / f"test_{stem}.py"
        try:
            os.replace(self.staging_dir / f"test_{stem}.py", kept)
        except FileNotFoundError:
            # No staged test: an older version's test must not travel with this code.
            with contextlib.suppress(FileNotFoundError):
                kept.unlink()
        fsync_dir(self.tests_dir)

    def _drop_quarantined(self, stem: str) -> None:
        for path in (self.quarantine_dir / f"{stem}.py", self.quarantine_dir / f"{stem}.reason"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def sweep_staging(self, keep: set[str]) -> tuple[str, ...]:
        """At start-up: remove every staged pair not in ``keep`` (the names of pending
        promotions) and every private gate dir — what a crash mid-gate leaves behind."""
        stems = {p.stem.removeprefix("test_") for p in self.staging_dir.glob("*.py")}
        removed = tuple(sorted(s for s in stems - keep if self.discard(s)))
        for entry in self.staging_dir.glob(".gate-*"):
            shutil.rmtree(entry, ignore_errors=True)
        if removed:
            log.info("staging_swept", tools=removed)
        return removed

    def _sweep_stale_gate_dirs(self) -> None:
        """Remove private gate dirs left by a crash (older than two gate timeouts)."""
        cutoff = time.time() - 2 * self.gate_limits.timeout_s
        for entry in self.staging_dir.glob(".gate-*"):
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < cutoff:
                    shutil.rmtree(entry, ignore_errors=True)


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise SelfCodeError(f"the tool's {what} is not valid text: {exc}") from None
