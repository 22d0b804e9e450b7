"""``ToolboxView``: the toolbox as it stands, read against the owner's approvals in the store:
which tools are live, staged or quarantined, and which files will not run as approved."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from shelldon.home import make_private_dir
from shelldon.store import ApprovedTool, Store
from shelldon.toolbox.errors import ToolboxError
from shelldon.toolbox.manifest import code_hash
from shelldon.toolbox.names import normalize_stem
from shelldon.toolbox.tool_files import ToolFileError, module_files, read_or_empty, read_tool_bytes


@dataclass(frozen=True, slots=True)
class Tampered:
    """A file in the toolbox that will not run: why, in words the owner can act on."""

    name: str
    state: str  # "live", "quarantined", or "unapproved" (a file nobody approved)
    problem: str


@dataclass(frozen=True, slots=True)
class LiveSource:
    """What a replacement is compared with: an approved tool's verified code, its kept test
    (b"" if none), when the owner approved it and whether it is live or quarantined."""

    name: str
    code: bytes
    test: bytes
    code_hash: str
    approved_at: float
    state: str = "live"


class ToolboxView:
    """The toolbox's directories under ``toolbox`` and the reads that verify them."""

    def __init__(self, toolbox: Path, store: Store) -> None:
        self.toolbox = toolbox
        self.store = store
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

    def _approved(self, state: str) -> tuple[ApprovedTool, ...]:
        return tuple(t for t in self.store.tools.approved() if t.state == state)

    def live(self) -> tuple[str, ...]:
        """Names of the live tools (approved and not quarantined; see ``tampered``)."""
        return tuple(t.name for t in self._approved("live"))

    def staged(self) -> tuple[str, ...]:
        """Names of gated tools waiting for the owner's decision."""
        return tuple(sorted(self.store.parked.promotion_names()))

    def quarantined(self) -> tuple[str, ...]:
        """Names of quarantined tools."""
        return tuple(t.name for t in self._approved("quarantined"))

    def approved_hash(self, name: str) -> str:
        """The code hash the owner approved for tool ``name`` ("" if none)."""
        tool = self.store.tools.approval(normalize_stem(name))
        return tool.code_hash if tool else ""

    def read_approved(self, tool: ApprovedTool) -> tuple[bytes, str]:
        """Approved ``tool``'s file as it is on disk (live or quarantine), and why it will not
        run ("" when it holds exactly the approved code)."""
        directory = self.live_dir if tool.state == "live" else self.quarantine_dir
        try:
            data = read_tool_bytes(directory / f"{tool.name}.py")
        except ToolFileError as exc:
            return b"", str(exc)
        if code_hash(data) != tool.code_hash:
            return data, "its code is not what the owner approved"
        return data, ""

    def tampered(self) -> tuple[Tampered, ...]:
        """Every toolbox file that will not run as approved: an approved tool whose file is
        missing, a link or other bytes, and a module in ``live/`` nobody approved."""
        found: list[Tampered] = []
        approved = {t.name: t for t in self.store.tools.approved()}
        for tool in approved.values():
            _data, problem = self.read_approved(tool)
            if problem:
                found.append(Tampered(tool.name, tool.state, problem))
        for path in module_files(self.live_dir):
            known = approved.get(path.stem)
            if known is None or known.state != "live":
                found.append(Tampered(path.stem, "unapproved", f"{path.name} was never approved"))
        return tuple(sorted(found, key=lambda t: t.name))

    def kept_test_path(self, stem: str) -> Path:
        """Where the test tool ``stem`` was promoted with is kept (for export and repair)."""
        return self.tests_dir / f"test_{stem}.py"

    def kept_test(self, name: str) -> Path | None:
        """The test tool ``name`` was promoted with, kept for export; None if there is none."""
        path = self.kept_test_path(normalize_stem(name))
        return path if path.is_file() else None

    def live_source(self, name: str) -> LiveSource | None:
        """Approved tool ``name``'s code and kept test, live or quarantined; None when there is
        no such tool or its file is not the approved code (nothing to compare with then)."""
        stem = normalize_stem(name)
        known = self.store.tools.approval(stem)
        if known is None:
            return None
        data, problem = self.read_approved(known)
        if problem:
            return None
        test = read_or_empty(self.kept_test_path(stem))
        return LiveSource(stem, data, test, known.code_hash, known.approved_at, known.state)

    def replacement_base(self, name: str, replaces: str) -> LiveSource | None:
        """The approved version a proposal of ``name`` replaces (None for a new tool); refused
        when ``replaces`` is another name, no tool, or one whose file is not the approved code
        (there is nothing trustworthy to show a diff against)."""
        if not replaces:
            return None
        stem, old = normalize_stem(name), normalize_stem(replaces)
        if stem != old:
            raise ToolboxError(
                f"a new version keeps its tool's name: propose it with name {old!r} "
                f"and replaces {old!r}"
            )
        if self.store.tools.approval(old) is None:
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
        return read_or_empty(path).decode("utf-8", "replace")
