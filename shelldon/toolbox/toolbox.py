"""Self-coded tools on disk: stage, gate, promote, discard, quarantine, restore.

``Toolbox`` is the sole writer of the toolbox, ``<home>/toolbox/``, which lies outside the
workspace and is out of every worker's and gate run's reach under both filesystem layers::

    live/         <stem>.py + manifest.json: the one part a worker sees, read-only
    tests/        test_<stem>.py kept at promotion, so an export can carry it
    quarantine/   <stem>.py (+ <stem>.reason) pulled after repeated failures
    retired/      <stem>-<time>/: a tool the owner took out, with its kept test; never run
    staging/      <stem>-<random>/: one new directory per gate run (the pair, the gate's tmp),
                  the only place that run may write; removed when the gate is done

What the owner approved is kept in the store, not on disk: a passing gate parks the exact bytes
it judged with the promotion (``Staged.code``/``Staged.test``), and ``promote`` writes those
bytes to a new file, after checking their hash against the one the owner was shown, and records
that hash in ``approved_tools``. Nothing a gate run wrote is ever renamed into place, so a test
that hard-linked or rewrote files in its staging directory changes nothing that runs later. The
manifest is rewritten from ``approved_tools`` after every change: a file whose bytes do not hash
to its approval is never listed as a tool. Quarantine and restore move a file without approving
it again; restore refuses a quarantined file that is not the approved code. Retiring a tool
withdraws its approval first (so it is out of the manifest at once), then moves its file and
kept test into ``retired/``, where nothing loads them.

Every file is written to a temp file, fsynced and renamed, so a worker sees the old toolbox or
the new one, never half of one. Where no filesystem layer is in force, nothing is staged or
gated (``shelldon.toolbox.policy``).

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

Not thread-safe: one actor owns a ``Toolbox``.
"""

from __future__ import annotations

import contextlib
import keyword
import os
import shutil
import sys
import tempfile
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.config import LimitsSettings, SandboxSettings, Settings
from shelldon.home import make_private_dir
from shelldon.store import ApprovedTool, Store
from shelldon.toolbox.gate import GateLimits, GateReport, GateRun, start_gate
from shelldon.toolbox.manifest import (
    MAX_TOOL_BYTES,
    Manifest,
    ToolFileError,
    code_hash,
    fsync_dir,
    module_files,
    read_tool_bytes,
    write_atomic,
    write_manifest,
)
from shelldon.toolbox.policy import selfcoded_refusal

log = structlog.get_logger(__name__)

__all__ = [
    "MAX_SOURCE_BYTES",
    "GateReport",
    "GateRun",
    "LiveSource",
    "Retired",
    "Toolbox",
    "ToolboxError",
    "Staged",
    "StemError",
    "Tampered",
    "normalize_stem",
]

MAX_SOURCE_BYTES = MAX_TOOL_BYTES
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


class ToolboxError(ValueError):
    """A self-coding step was refused; the message says why and what to do instead."""


class StemError(ToolboxError):
    """A proposed tool name cannot become a module stem."""


@dataclass(frozen=True, slots=True)
class Staged:
    """A staged tool: its stem, the name the model asked for, its own staging directory with
    both files, the bytes written there (what a passing gate parks) and the code's hash."""

    name: str
    requested: str
    tool_path: Path
    test_path: Path
    code_hash: str
    replaces: bool = False
    code: bytes = b""
    test: bytes = b""

    @property
    def directory(self) -> Path:
        """This gate run's staging directory (the only place it may write)."""
        return self.tool_path.parent


@dataclass(frozen=True, slots=True)
class Tampered:
    """A file in the toolbox that will not run: why, in words the owner can act on."""

    name: str
    state: str  # "live", "quarantined", or "unapproved" (a file nobody approved)
    problem: str


@dataclass(frozen=True, slots=True)
class Retired:
    """A tool the owner took out: its approval as it was, and where its files went."""

    name: str
    code_hash: str
    state: str
    archive: Path


@dataclass(frozen=True, slots=True)
class LiveSource:
    """An approved tool's code (verified against its approval) and its kept test (b"" if none),
    with when the owner approved it and whether it is live or quarantined: what a replacement
    is compared with."""

    name: str
    code: bytes
    test: bytes
    code_hash: str
    approved_at: float
    state: str = "live"


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


class Toolbox:
    """The toolbox on disk, its approvals in the store, and every change made to either."""

    def __init__(
        self,
        toolbox: Path,
        store: Store,
        limits: LimitsSettings | None = None,
        sandbox: SandboxSettings | None = None,
    ) -> None:
        self.toolbox = toolbox
        self.store = store
        self.sandbox = sandbox or SandboxSettings()
        self.gate_limits = GateLimits.from_settings(limits or LimitsSettings(), sandbox)
        self.live_dir = toolbox / "live"
        self.tests_dir = toolbox / "tests"
        self.quarantine_dir = toolbox / "quarantine"
        self.staging_dir = toolbox / "staging"
        self.retired_dir = toolbox / "retired"
        for directory in (
            toolbox,
            self.live_dir,
            self.tests_dir,
            self.quarantine_dir,
            self.staging_dir,
            self.retired_dir,
        ):
            make_private_dir(directory)

    @classmethod
    def from_settings(cls, settings: Settings, store: Store) -> Toolbox:
        """The toolbox of ``settings``' home, gated as its ``[sandbox]`` says."""
        return cls(settings.toolbox, store, settings.limits, settings.sandbox)

    # listing

    def off_reason(self) -> str:
        """Why self-coded tools are off on this machine ("" when they are on)."""
        return selfcoded_refusal(self.sandbox)

    def _approved(self, state: str) -> tuple[ApprovedTool, ...]:
        return tuple(t for t in self.store.approved_tools() if t.state == state)

    def live(self) -> tuple[str, ...]:
        """Names of the live tools (approved and not quarantined; see ``tampered``)."""
        return tuple(t.name for t in self._approved("live"))

    def staged(self) -> tuple[str, ...]:
        """Names of gated tools waiting for the owner's decision."""
        return tuple(sorted(self.store.promotion_names()))

    def quarantined(self) -> tuple[str, ...]:
        """Names of quarantined tools."""
        return tuple(t.name for t in self._approved("quarantined"))

    def approved_hash(self, name: str) -> str:
        """The code hash the owner approved for tool ``name`` ("" if none)."""
        tool = self.store.approved_tool(normalize_stem(name))
        return tool.code_hash if tool else ""

    def tool_path(self, name: str) -> Path | None:
        """Where approved tool ``name``'s file belongs (live or quarantine); None if unknown."""
        tool = self.store.approved_tool(normalize_stem(name))
        if tool is None:
            return None
        directory = self.live_dir if tool.state == "live" else self.quarantine_dir
        return directory / f"{tool.name}.py"

    def tampered(self) -> tuple[Tampered, ...]:
        """Every toolbox file that will not run as approved: an approved tool whose file is
        missing, a link or other bytes, and a module in ``live/`` nobody approved."""
        found: list[Tampered] = []
        approved = {t.name: t for t in self.store.approved_tools()}
        for tool in approved.values():
            path = self.tool_path(tool.name)
            assert path is not None
            try:
                data = read_tool_bytes(path)
            except ToolFileError as exc:
                found.append(Tampered(tool.name, tool.state, str(exc)))
                continue
            if code_hash(data) != tool.code_hash:
                found.append(
                    Tampered(tool.name, tool.state, "its code is not what the owner approved")
                )
        for path in module_files(self.live_dir):
            known = approved.get(path.stem)
            if known is None or known.state != "live":
                found.append(Tampered(path.stem, "unapproved", f"{path.name} was never approved"))
        return tuple(sorted(found, key=lambda t: t.name))

    def kept_test(self, name: str) -> Path | None:
        """The test tool ``name`` was promoted with, kept for export; None if there is none."""
        path = self.tests_dir / f"test_{normalize_stem(name)}.py"
        return path if path.is_file() else None

    def live_source(self, name: str) -> LiveSource | None:
        """Approved tool ``name``'s code and kept test, live or quarantined; None when there is
        no such tool or its file is not the approved code (nothing to compare with then)."""
        stem = normalize_stem(name)
        known = self.store.approved_tool(stem)
        path = self.tool_path(stem)
        if known is None or path is None:
            return None
        try:
            data = read_tool_bytes(path)
        except ToolFileError:
            return None
        if code_hash(data) != known.code_hash:
            return None
        kept = self.kept_test(stem)
        test = b""
        if kept is not None:
            with contextlib.suppress(ToolFileError):
                test = read_tool_bytes(kept)
        return LiveSource(stem, data, test, known.code_hash, known.approved_at, known.state)

    def replacement_base(self, name: str, replaces: str) -> LiveSource | None:
        """What a proposal of ``name`` replaces: None for a new tool (``replaces`` empty), else
        the approved version it is a new version of. Refused (``ToolboxError``) when
        ``replaces`` is another name, names no tool, or names one whose file is not the
        approved code (there is nothing trustworthy to show a diff against)."""
        if not replaces:
            return None
        stem, old = normalize_stem(name), normalize_stem(replaces)
        if stem != old:
            raise ToolboxError(
                f"a new version keeps its tool's name: propose it with name {old!r} "
                f"and replaces {old!r}"
            )
        if self.store.approved_tool(old) is None:
            raise ToolboxError(
                f"there is no tool named {old!r} to replace; propose it as a new tool "
                "(without replaces)"
            )
        base = self.live_source(old)
        if base is None:
            raise ToolboxError(
                f"the file of {old!r} is not the code the owner approved, so there is nothing "
                "to compare a new version with; the owner can /retire it first"
            )
        return base

    def quarantine_reason(self, name: str) -> str:
        """Why tool ``name`` was quarantined ("" if unknown)."""
        path = self.quarantine_dir / f"{normalize_stem(name)}.reason"
        try:
            return read_tool_bytes(path).decode("utf-8", "replace")
        except ToolFileError:
            return ""

    # stage and gate

    def stage(self, name: str, code: str, test: str, *, replace: bool = False) -> Staged:
        """Write ``<stem>.py`` and ``test_<stem>.py`` into a new staging directory of their own.
        Refused where no filesystem layer would confine the gate's run of the test."""
        off = self.off_reason()
        if off:
            raise ToolboxError(off)
        stem = normalize_stem(name)
        data = {"code": _encode(code, "code"), "test": _encode(test, "test")}
        for what, blob in data.items():
            if len(blob) > MAX_SOURCE_BYTES:
                raise ToolboxError(
                    f"the tool's {what} is {len(blob)} bytes; the limit is {MAX_SOURCE_BYTES} "
                    "(64 KB): make it smaller"
                )
        known = self.store.approved_tool(stem)
        if known is not None and not replace:
            where = "live" if known.state == "live" else "quarantine"
            raise ToolboxError(
                f"a tool named {stem!r} already exists (in {where}); pick another "
                "name, or propose it explicitly as a replacement"
            )
        self._sweep_stale_gate_dirs()
        directory = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=self.staging_dir))
        tool_path = directory / f"{stem}.py"
        test_path = directory / f"test_{stem}.py"
        _write_new(test_path, data["test"])
        _write_new(tool_path, data["code"])
        digest = code_hash(data["code"])
        staged = Staged(
            stem, name, tool_path, test_path, digest, replace, data["code"], data["test"]
        )
        log.info("tool_staged", tool=stem, code_hash=digest, replaces=replace)
        return staged

    def start_gate(self, staged: Staged) -> GateRun:
        """Start the gate without waiting (see ``GateRun``); its staging directory is removed
        once the gate is done, passed or not (a passing tool's bytes are in ``staged``)."""

        def drop_directory(_report: GateReport) -> None:
            shutil.rmtree(staged.directory, ignore_errors=True)

        return start_gate(staged.directory, staged.name, self.gate_limits, drop_directory)

    def run_gate(self, staged: Staged) -> GateReport:
        """Gate the staged tool and wait for the verdict."""
        return self.start_gate(staged).wait()

    # owner decisions

    def promote(
        self,
        name: str,
        code: str | bytes,
        test: str | bytes = b"",
        *,
        expected_hash: str,
        replace: bool = False,
        replaces_hash: str = "",
        turn_id: str = "",
    ) -> Path:
        """Make ``code`` (the parked bytes the gate passed) live tool ``name``: checked against
        ``expected_hash`` (what the owner was shown), recorded as approved, written to a new
        file; ``test`` is kept beside it for export. A replacement shown as a diff against
        approved code ``replaces_hash`` is refused if the tool is no longer that code.
        Returns the live path."""
        stem = normalize_stem(name)
        data = code if isinstance(code, bytes) else _encode(code, "code")
        test_data = test if isinstance(test, bytes) else _encode(test, "test")
        if not data:
            raise ToolboxError(
                f"the code of {stem!r} was not kept with its approval request (it was parked "
                "by an older version); propose it again"
            )
        if code_hash(data) != expected_hash:
            raise ToolboxError(
                f"the code of {stem!r} is not the code that was approved (hash changed); "
                "propose it again"
            )
        if len(data) > MAX_SOURCE_BYTES or len(test_data) > MAX_SOURCE_BYTES:
            raise ToolboxError(f"the code or test of {stem!r} is over 64 KB")
        current = self.store.approved_tool(stem)
        if current is not None and not replace:
            raise ToolboxError(f"a tool named {stem!r} already exists; promote as a replacement")
        if replaces_hash and (current is None or current.code_hash != replaces_hash):
            # The owner approved a diff against that version: against any other it is not
            # the change they saw.
            raise ToolboxError(
                f"{stem!r} changed since you were shown the new version's diff (it was "
                "retired, replaced or restored); ask me to propose it again"
            )
        kept = self.tests_dir / f"test_{stem}.py"
        if test_data:
            write_atomic(kept, test_data)
        else:
            # No test: an older version's test must not travel with this code.
            with contextlib.suppress(FileNotFoundError):
                kept.unlink()
            fsync_dir(self.tests_dir)
        self.store.approve_tool(stem, expected_hash, time.time(), turn_id)
        live = self.live_dir / f"{stem}.py"
        write_atomic(live, data)  # a new inode holding exactly the approved bytes
        self._drop_quarantined(stem)
        self.write_manifest()
        log.info("tool_promoted", tool=stem, code_hash=expected_hash, replaced=replace)
        return live

    def discard(self, name: str) -> bool:
        """Remove what is left of ``name``'s gate runs in staging; True if anything was there.
        (A parked promotion's bytes live in the store and go when it is taken.)"""
        stem = normalize_stem(name)
        removed = False
        for entry in self.staging_dir.glob(f"{stem}-*"):
            shutil.rmtree(entry, ignore_errors=True)
            removed = True
        if removed:
            log.info("tool_discarded", tool=stem)
        return removed

    # strikes

    def quarantine(self, name: str, reason: str) -> Path:
        """Move live tool ``name`` out of discovery's reach, noting why; its approval (and its
        file's content) stay as they are."""
        stem = normalize_stem(name)
        known = self.store.approved_tool(stem)
        if known is None or known.state != "live":
            raise ToolboxError(f"no live tool named {stem!r} to quarantine")
        live = self.live_dir / f"{stem}.py"
        target = self.quarantine_dir / f"{stem}.py"
        write_atomic(self.quarantine_dir / f"{stem}.reason", reason.encode("utf-8", "replace"))
        self.store.set_tool_state(stem, "quarantined")
        try:
            os.replace(live, target)
        except FileNotFoundError:
            log.warning("quarantined_tool_missing", tool=stem)
        fsync_dir(self.quarantine_dir)
        fsync_dir(self.live_dir)
        self.write_manifest()
        log.warning("tool_quarantined", tool=stem, reason=reason[:200])
        return target

    def restore(self, name: str) -> Path:
        """Move quarantined tool ``name`` back live (the caller resets its strikes); refused
        when the quarantined file is not the code the owner approved."""
        stem = normalize_stem(name)
        known = self.store.approved_tool(stem)
        source = self.quarantine_dir / f"{stem}.py"
        live = self.live_dir / f"{stem}.py"
        if known is None or known.state != "quarantined":
            raise ToolboxError(f"no quarantined tool named {stem!r} to restore")
        if os.path.lexists(live):
            raise ToolboxError(f"a live tool named {stem!r} already exists; it cannot be restored")
        try:
            data = read_tool_bytes(source)
        except ToolFileError as exc:
            raise ToolboxError(f"{stem!r} cannot be restored: {exc}") from None
        if code_hash(data) != known.code_hash:
            raise ToolboxError(
                f"the quarantined {stem!r} is not the code the owner approved (it was changed "
                "on disk); it stays quarantined: propose it again"
            )
        os.replace(source, live)
        with contextlib.suppress(FileNotFoundError):
            (self.quarantine_dir / f"{stem}.reason").unlink()
        self.store.set_tool_state(stem, "live")
        fsync_dir(self.quarantine_dir)
        fsync_dir(self.live_dir)
        self.write_manifest()
        log.info("tool_restored", tool=stem)
        return live

    def retire(self, name: str) -> Retired:
        """Take approved tool ``name`` (live or quarantined) out for good: its approval is
        withdrawn and the manifest rewritten before anything moves, so no later turn offers or
        loads it; its file, kept test and quarantine note go to a new ``retired/`` directory."""
        stem = normalize_stem(name)
        known = self.store.forget_tool(stem)
        if known is None:
            raise ToolboxError(f"no live or quarantined tool named {stem!r} to retire")
        self.write_manifest()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        archive = Path(tempfile.mkdtemp(prefix=f"{stem}-{stamp}-", dir=self.retired_dir))
        moves = (
            (self.live_dir / f"{stem}.py", archive / f"{stem}.py"),
            (self.quarantine_dir / f"{stem}.py", archive / f"{stem}.py"),
            (self.quarantine_dir / f"{stem}.reason", archive / f"{stem}.reason"),
            (self.tests_dir / f"test_{stem}.py", archive / f"test_{stem}.py"),
        )
        for source, target in moves:
            # os.replace moves a link as a link: nothing outside the toolbox is followed.
            if os.path.lexists(source) and not os.path.lexists(target):
                try:
                    os.replace(source, target)
                except OSError as exc:
                    # The tool is out already (no approval, not in the manifest); a file left
                    # behind never runs and /tools names it as never approved.
                    log.warning("retired_file_left", tool=stem, path=str(source), error=str(exc))
        for directory in (archive, self.live_dir, self.quarantine_dir, self.tests_dir):
            with contextlib.suppress(OSError):
                fsync_dir(directory)
        log.info("tool_retired", tool=stem, code_hash=known.code_hash, archive=str(archive))
        return Retired(stem, known.code_hash, known.state, archive)

    # the manifest and start-up

    def write_manifest(self) -> Manifest:
        """Rewrite the live manifest from the approvals in the store (never from the files)."""
        approved = {t.name: t.code_hash for t in self._approved("live")}
        return write_manifest(self.live_dir, approved)

    def reconcile(self) -> tuple[Tampered, ...]:
        """At start-up: the manifest rewritten from the store (whatever was done to it while
        the service was down), every gate run's leftovers removed, and each toolbox file that
        will not run logged (returned), as is why self-coded tools are off, if they are."""
        off = self.off_reason()
        if off:
            log.warning("selfcoded_tools_off", why=off)
        self.sweep_staging()
        self.write_manifest()
        found = self.tampered()
        for bad in found:
            log.warning("toolbox_file_refused", tool=bad.name, state=bad.state, problem=bad.problem)
        return found

    def sweep_staging(self) -> tuple[str, ...]:
        """Remove every gate run's staging directory (what a crash mid-gate leaves behind);
        parked promotions keep their bytes in the store, so none is needed after a gate."""
        removed = []
        for entry in sorted(self.staging_dir.iterdir()):
            removed.append(entry.name)
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()
        if removed:
            log.info("staging_swept", entries=len(removed))
        return tuple(removed)

    # internals

    def _drop_quarantined(self, stem: str) -> None:
        for path in (self.quarantine_dir / f"{stem}.py", self.quarantine_dir / f"{stem}.reason"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def _sweep_stale_gate_dirs(self) -> None:
        """Remove gate dirs left by a crash (older than two gate timeouts)."""
        cutoff = time.time() - 2 * self.gate_limits.timeout_s
        for entry in self.staging_dir.iterdir():
            with contextlib.suppress(OSError):
                if entry.lstat().st_mtime < cutoff:
                    if entry.is_dir() and not entry.is_symlink():
                        shutil.rmtree(entry, ignore_errors=True)
                    else:
                        entry.unlink()


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist) holding ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolboxError(f"the tool's {what} is not valid text: {exc}") from None
