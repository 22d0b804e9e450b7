"""Self-coded tools on disk: stage, gate, promote, quarantine, restore, retire.

``Toolbox`` is the sole writer of ``<home>/toolbox/``, which lies outside the workspace and out
of every worker's and gate run's reach under both filesystem layers::

    live/         <stem>.py + manifest.json: the one part a worker sees, read-only
    tests/        test_<stem>.py kept at promotion, so an export can carry it
    quarantine/   <stem>.py (+ <stem>.reason) pulled after repeated failures
    retired/      <stem>-<time>/: a tool the owner took out, with its kept test; never run
    staging/      <stem>-<random>/: one new directory per gate run (the pair, the gate's tmp),
                  the only place that run may write; removed when the gate is done

What the owner approved is kept in the store, not on disk: a passing gate parks the exact bytes
it judged, and ``promote`` writes those bytes to a new file once their hash is the one the owner
was shown, and records it in ``approved_tools``. Nothing a gate run wrote is ever renamed into
place, so a test that hard-linked or rewrote files in its staging directory changes nothing that
runs later. The manifest is rewritten from ``approved_tools`` after every change, so a file
whose bytes do not hash to its approval is never listed. Quarantine and restore move a file
without approving it again (restore refuses one that is not the approved code).

Every file is written to a temp file, fsynced and renamed, so a worker sees the old toolbox or
the new one, never half of one. Without a filesystem layer nothing is staged or gated
(``shelldon.toolbox.policy``).

A live or quarantined name is replaced only when the caller says so (``replace=True``): a new
version of a tool the owner trusts is their decision with the new code in front of them, never
a side effect of picking a name twice. Not thread-safe: one actor owns a ``Toolbox``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from shelldon.config import LimitsSettings, SandboxSettings, Settings
from shelldon.store import Store
from shelldon.toolbox.atomic import fsync_dir, write_atomic, write_new
from shelldon.toolbox.errors import StemError, ToolboxError
from shelldon.toolbox.gate import GateLimits, GateReport, GateRun, Launch, start_gate
from shelldon.toolbox.manifest import Manifest, code_hash, write_manifest
from shelldon.toolbox.names import normalize_stem
from shelldon.toolbox.policy import selfcoded_refusal
from shelldon.toolbox.tool_files import MAX_TOOL_BYTES, ToolFileError, read_tool_bytes
from shelldon.toolbox.view import LiveSource, Tampered, ToolboxView

log = structlog.get_logger(__name__)

__all__ = ["LiveSource", "Staged", "StemError", "Toolbox", "ToolboxError", "normalize_stem"]


@dataclass(frozen=True, slots=True)
class Staged:
    """A staged tool: its stem, its module in its own staging directory, the bytes written
    there (what a passing gate parks) and the code's hash."""

    name: str
    tool_path: Path
    code_hash: str
    code: bytes
    test: bytes

    @property
    def directory(self) -> Path:
        """This gate run's staging directory (the only place it may write)."""
        return self.tool_path.parent


@dataclass(frozen=True, slots=True)
class Retired:
    """A tool the owner took out: its approval as it was, and where its files went."""

    name: str
    code_hash: str
    state: str
    archive: Path


class Toolbox(ToolboxView):
    """The toolbox on disk, its approvals in the store, and every change made to either."""

    def __init__(
        self,
        toolbox: Path,
        store: Store,
        limits: LimitsSettings | None = None,
        sandbox: SandboxSettings | None = None,
    ) -> None:
        super().__init__(toolbox, store)
        self.sandbox = sandbox or SandboxSettings()
        self.gate_limits = GateLimits.from_settings(limits or LimitsSettings(), self.sandbox)

    @classmethod
    def from_settings(cls, settings: Settings, store: Store) -> Toolbox:
        """The toolbox of ``settings``' home, gated as its ``[sandbox]`` says."""
        return cls(settings.toolbox, store, settings.limits, settings.sandbox)

    def off_reason(self) -> str:
        """Why self-coded tools are off on this machine ("" when they are on)."""
        return selfcoded_refusal(self.sandbox)

    def stage(self, name: str, code: str, test: str, *, replace: bool = False) -> Staged:
        """Write ``<stem>.py`` and ``test_<stem>.py`` into a new staging directory of their own.
        Refused where no filesystem layer would confine the gate's run of the test."""
        off = self.off_reason()
        if off:
            raise ToolboxError(off)
        stem = normalize_stem(name)
        data = {"code": _encode(code, "code"), "test": _encode(test, "test")}
        for what, blob in data.items():
            if len(blob) > MAX_TOOL_BYTES:
                raise ToolboxError(
                    f"the tool's {what} is {len(blob)} bytes; the limit is {MAX_TOOL_BYTES} "
                    "(64 KB): make it smaller"
                )
        known = self.store.tools.approval(stem)
        if known is not None and not replace:
            where = "live" if known.state == "live" else "quarantine"
            raise ToolboxError(
                f"a tool named {stem!r} already exists (in {where}); pick another "
                "name, or propose it explicitly as a replacement"
            )
        self._sweep_stale_gate_dirs()
        directory = Path(tempfile.mkdtemp(prefix=f"{stem}-", dir=self.staging_dir))
        tool_path = directory / f"{stem}.py"
        write_new(directory / f"test_{stem}.py", data["test"])
        write_new(tool_path, data["code"])
        digest = code_hash(data["code"])
        log.info("tool_staged", tool=stem, code_hash=digest, replaces=replace)
        return Staged(stem, tool_path, digest, data["code"], data["test"])

    def start_gate(self, staged: Staged, start: Launch | None = None) -> GateRun:
        """Start the gate without waiting (``start`` forks its pytest, here by default); its
        staging directory goes once it is done (a passing tool's bytes are in ``staged``)."""

        def drop_directory(_report: GateReport) -> None:
            shutil.rmtree(staged.directory, ignore_errors=True)

        return start_gate(staged.directory, staged.name, self.gate_limits, drop_directory, start)

    def run_gate(self, staged: Staged) -> GateReport:
        """Gate the staged tool and wait for the verdict."""
        return self.start_gate(staged).wait()

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
        """Make ``code`` (the parked bytes the gate passed, which must hash to ``expected_hash``,
        what the owner was shown) live tool ``name`` in a new file, ``test`` kept for export;
        a replacement is refused if the tool is no longer the code ``replaces_hash`` it was
        shown against. Returns the live path."""
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
        if len(data) > MAX_TOOL_BYTES or len(test_data) > MAX_TOOL_BYTES:
            raise ToolboxError(f"the code or test of {stem!r} is over 64 KB")
        current = self.store.tools.approval(stem)
        if current is not None and not replace:
            raise ToolboxError(f"a tool named {stem!r} already exists; promote as a replacement")
        if replaces_hash and (current is None or current.code_hash != replaces_hash):
            # The owner approved a diff against that version: against any other it is not
            # the change they saw.
            raise ToolboxError(
                f"{stem!r} changed since you were shown the new version's diff (it was "
                "retired, replaced or restored); ask me to propose it again"
            )
        kept = self.kept_test_path(stem)
        if test_data:
            write_atomic(kept, test_data)
        else:
            # No test: an older version's test must not travel with this code.
            with contextlib.suppress(FileNotFoundError):
                kept.unlink()
            fsync_dir(self.tests_dir)
        self.store.tools.approve(stem, expected_hash, time.time(), turn_id)
        live = self.live_dir / f"{stem}.py"
        write_atomic(live, data)  # a new inode holding exactly the approved bytes
        self._drop_quarantined(stem)
        self.write_manifest()
        log.info("tool_promoted", tool=stem, code_hash=expected_hash, replaced=replace)
        return live

    def quarantine(self, name: str, reason: str) -> Path:
        """Move live tool ``name`` out of discovery's reach, noting why; its approval (and its
        file's content) stay as they are."""
        stem = normalize_stem(name)
        known = self.store.tools.approval(stem)
        if known is None or known.state != "live":
            raise ToolboxError(f"no live tool named {stem!r} to quarantine")
        live = self.live_dir / f"{stem}.py"
        target = self.quarantine_dir / f"{stem}.py"
        write_atomic(self.quarantine_dir / f"{stem}.reason", reason.encode("utf-8", "replace"))
        self.store.tools.set_state(stem, "quarantined")
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
        known = self.store.tools.approval(stem)
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
        self.store.tools.set_state(stem, "live")
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
        known = self.store.tools.forget(stem)
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

    def sweep_staging(self) -> None:
        """Remove every gate run's staging directory (what a crash mid-gate leaves behind);
        parked promotions keep their bytes in the store, so none is needed after a gate."""
        entries = list(self.staging_dir.iterdir())
        for entry in entries:
            _remove(entry)
        if entries:
            log.info("staging_swept", entries=len(entries))

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
                    _remove(entry)


def _remove(entry: Path) -> None:
    """Remove a staging entry; a link is unlinked, never followed."""
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def _encode(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolboxError(f"the tool's {what} is not valid text: {exc}") from None
