"""The toolbox archive: live self-coded tools in one tar.gz that moves between devices.

Layout (stdlib ``tarfile``, gzip)::

    toolbox.json            {"format": 1, "tools": [{"name", "description", "params_schema",
                             "code_hash", "has_test"}, ...]}
    tools/<stem>.py         each tool's source
    tests/test_<stem>.py    its test, when one was kept at promotion

``read_archive`` treats the file as hostile: it decompresses at most ``max_uncompressed_bytes``
into memory (a gzip bomb stops there), then accepts only regular files at exactly the names
above — an absolute name, a ``..`` component, a link, a device, an oversize member, a duplicate,
too many members, a member not listed in ``toolbox.json`` or whose hash does not match: each
refuses the whole archive with ``ArchiveError`` before anything is written anywhere.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shelldon.toolbox.atomic import write_atomic
from shelldon.toolbox.errors import StemError
from shelldon.toolbox.manifest import ManifestEntry, build_manifest, code_hash, describe_source
from shelldon.toolbox.names import normalize_stem
from shelldon.toolbox.tool_files import (
    MAX_TOOL_BYTES,
    ToolFileError,
    read_or_empty,
    read_tool_bytes,
)
from shelldon.toolbox.toolbox import Toolbox

ARCHIVE_FORMAT = 1
MANIFEST_MEMBER = "toolbox.json"


class ArchiveError(ValueError):
    """A toolbox archive cannot be written or was refused; the message says what and why."""


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    """Caps on an archive being read: what a Pi can hold in memory while checking it."""

    max_archive_bytes: int = 16 * 1024 * 1024
    max_uncompressed_bytes: int = 32 * 1024 * 1024
    max_member_bytes: int = MAX_TOOL_BYTES
    max_manifest_bytes: int = 1024 * 1024
    max_tools: int = 200

    @property
    def max_members(self) -> int:
        """Manifest, two directory entries, and a module plus a test per tool."""
        return 3 + 2 * self.max_tools


@dataclass(frozen=True, slots=True)
class ArchivedTool:
    """One tool as carried by an archive: its stem, code, test ("" if none) and code hash."""

    name: str
    description: str
    code: str
    test: str
    code_hash: str


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What an export wrote: the tools, those without a kept test, and the broken and tampered
    ones (not the code the owner approved) left out."""

    path: Path
    exported: tuple[str, ...]
    without_test: tuple[str, ...] = ()
    skipped_broken: tuple[str, ...] = ()
    skipped_tampered: tuple[str, ...] = ()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = int(mtime)
    tar.addfile(info, io.BytesIO(data))


def export_toolbox(
    selfcode: Toolbox, path: Path, *, overwrite: bool = False, quarantined: bool = False
) -> ExportReport:
    """Write every live tool (with its kept test) to the archive ``path``, atomically: only
    approved tools whose file holds exactly the approved bytes; with ``quarantined`` (a backup)
    the quarantined ones too, under the same rule."""
    if path.exists() and not overwrite:
        raise ArchiveError(f"{path} already exists; choose another file or pass --force")
    if path.is_dir():
        raise ArchiveError(f"{path} is a directory; give a file name like toolbox.tar.gz")
    sources = [(selfcode.live_dir, selfcode.live())]
    if quarantined:
        sources.append((selfcode.quarantine_dir, selfcode.quarantined()))
    now = time.time()
    entries: list[dict[str, Any]] = []
    files: list[tuple[str, bytes]] = []
    without_test: list[str] = []
    exported: list[str] = []
    broken: list[str] = []
    tampered: list[str] = []
    for directory, names in sources:
        manifest = build_manifest(directory, {n: selfcode.approved_hash(n) for n in names})
        exported += [e.name for e in manifest.entries]
        broken += [b.name for b in manifest.broken]
        tampered += [b.name for b in manifest.tampered]
        for entry in manifest.entries:
            code, test = _verified_pair(selfcode, directory, entry)
            files.append((f"tools/{entry.name}.py", code))
            if test:
                files.append((f"tests/test_{entry.name}.py", test))
            else:
                without_test.append(entry.name)
            entries.append(
                {
                    "name": entry.name,
                    "description": entry.description,
                    "params_schema": entry.params_schema,
                    "code_hash": entry.code_hash,
                    "has_test": bool(test),
                }
            )
    payload = json.dumps({"format": ARCHIVE_FORMAT, "tools": entries}, indent=1).encode()
    # Built in memory: the tools already are (at most 64 KB each).
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        _add(tar, MANIFEST_MEMBER, payload, now)
        for name, data in files:
            _add(tar, name, data, now)
    try:
        write_atomic(path, buffer.getvalue())
    except OSError as exc:
        raise ArchiveError(f"cannot write {path}: {exc.strerror or exc}") from None
    return ExportReport(path, tuple(exported), tuple(without_test), tuple(broken), tuple(tampered))


def _verified_pair(selfcode: Toolbox, directory: Path, entry: ManifestEntry) -> tuple[bytes, bytes]:
    """One approved tool's code, checked against its approval once more, and its kept test
    (b"" if none)."""
    try:
        code = read_tool_bytes(directory / entry.file)
    except ToolFileError as exc:
        raise ArchiveError(f"tool {entry.name} changed while exporting: {exc}") from None
    if code_hash(code) != entry.code_hash:
        raise ArchiveError(f"tool {entry.name} changed while exporting; run it again")
    return code, read_or_empty(selfcode.kept_test_path(entry.name))


def _decompress(path: Path, limits: ArchiveLimits) -> bytes:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ArchiveError(f"cannot read {path}: {exc.strerror or exc}") from None
    if size > limits.max_archive_bytes:
        raise ArchiveError(
            f"{path} is {size} bytes; a toolbox archive is at most {limits.max_archive_bytes}"
        )
    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read(limits.max_uncompressed_bytes + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise ArchiveError(
            f"{path} is not a shelldon toolbox (a tar.gz made by 'shelldon tools export'): {exc}"
        ) from None
    if len(raw) > limits.max_uncompressed_bytes:
        raise ArchiveError(
            f"{path} unpacks to more than {limits.max_uncompressed_bytes} bytes; refused "
            "(a toolbox is small: at most 64 KB per file)"
        )
    return raw


def checked_member_name(member: tarfile.TarInfo) -> str:
    """The member's name checked for escapes (absolute, ``..``, backslash or NUL, a link, a
    device or other special file) and normalised; raises ``ArchiveError`` naming the member.
    Every archive shelldon reads goes through here (toolbox imports and backups)."""
    raw = member.name
    shown = repr(raw[:120])
    if raw.startswith(("/", "\\")) or (len(raw) > 1 and raw[1] == ":"):
        raise ArchiveError(f"member {shown} has an absolute path; refused")
    if "\\" in raw or "\0" in raw:
        raise ArchiveError(f"member {shown} has a backslash or NUL in its name; refused")
    parts = raw.split("/")
    if ".." in parts:
        raise ArchiveError(f"member {shown} climbs out with '..' (path traversal); refused")
    if member.issym() or member.islnk():
        raise ArchiveError(f"member {shown} is a link (to {member.linkname!r:.120}); refused")
    if not (member.isreg() or member.isdir()):
        raise ArchiveError(f"member {shown} is a device, fifo or other special file; refused")
    return "/".join(p for p in parts if p not in ("", "."))


def _members(raw: bytes, limits: ArchiveLimits) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    count = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            while (member := tar.next()) is not None:
                count += 1
                if count > limits.max_members:
                    raise ArchiveError(
                        f"the archive has more than {limits.max_members} members "
                        f"(at most {limits.max_tools} tools); refused"
                    )
                name = checked_member_name(member)
                if member.isdir():
                    if name not in ("", "tools", "tests"):
                        raise ArchiveError(f"unexpected directory {name!r:.120} in the archive")
                    continue
                cap = (
                    limits.max_manifest_bytes
                    if name == MANIFEST_MEMBER
                    else limits.max_member_bytes
                )
                if member.size > cap:
                    raise ArchiveError(
                        f"member {name!r:.120} is {member.size} bytes; the limit is {cap}"
                    )
                if name in files:
                    raise ArchiveError(f"member {name!r:.120} appears twice; refused")
                fh = tar.extractfile(member)
                if fh is None:  # pragma: no cover - isreg() members always have data
                    raise ArchiveError(f"member {name!r:.120} has no data")
                files[name] = fh.read(cap + 1)
    except tarfile.TarError as exc:
        raise ArchiveError(f"the archive is not a readable tar file: {exc}") from None
    return files


def _manifest(files: dict[str, bytes]) -> list[dict[str, Any]]:
    try:
        raw = files.pop(MANIFEST_MEMBER)
    except KeyError:
        raise ArchiveError(
            f"the archive has no {MANIFEST_MEMBER}; make it with 'shelldon tools export'"
        ) from None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ArchiveError(f"{MANIFEST_MEMBER} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != ARCHIVE_FORMAT:
        raise ArchiveError(
            f"{MANIFEST_MEMBER} is not toolbox format {ARCHIVE_FORMAT}; "
            "export it again with this version of shelldon"
        )
    tools = data.get("tools")
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise ArchiveError(f"{MANIFEST_MEMBER} has no list of tools")
    return tools


def _text(files: dict[str, bytes], member: str) -> str:
    try:
        return files.pop(member).decode("utf-8")
    except UnicodeDecodeError:
        raise ArchiveError(f"{member} is not UTF-8 text; refused") from None


def read_archive(path: Path, limits: ArchiveLimits | None = None) -> tuple[ArchivedTool, ...]:
    """Read and check the whole archive at ``path`` in memory; ``ArchiveError`` if refused."""
    limits = limits or ArchiveLimits()
    files = _members(_decompress(path, limits), limits)
    listed = _manifest(files)
    if len(listed) > limits.max_tools:
        raise ArchiveError(f"the archive lists {len(listed)} tools; at most {limits.max_tools}")
    tools: list[ArchivedTool] = []
    seen: set[str] = set()
    for item in listed:
        name, digest = item.get("name"), item.get("code_hash")
        if not isinstance(name, str) or not isinstance(digest, str):
            raise ArchiveError(f"{MANIFEST_MEMBER} has a tool entry without a name or hash")
        try:
            stem = normalize_stem(name)
        except StemError as exc:
            raise ArchiveError(f"{MANIFEST_MEMBER} lists a bad tool name: {exc}") from None
        if stem != name or stem in seen:
            raise ArchiveError(f"{MANIFEST_MEMBER} lists tool {name!r:.80} twice or unnormalised")
        seen.add(stem)
        module = f"tools/{stem}.py"
        if module not in files:
            raise ArchiveError(f"{MANIFEST_MEMBER} lists {stem} but the archive has no {module}")
        code = _text(files, module)
        if code_hash(code) != digest:
            raise ArchiveError(
                f"{module} does not match its hash in {MANIFEST_MEMBER}: the archive is "
                "damaged or was edited; export it again"
            )
        test_member = f"tests/test_{stem}.py"
        test = _text(files, test_member) if test_member in files else ""
        # The DESCRIPTION the code itself declares (toolbox.json's copy is not trusted).
        described = describe_source(stem, f"{stem}.py", code.encode())
        description = described.description if isinstance(described, ManifestEntry) else ""
        tools.append(ArchivedTool(stem, description, code, test, digest))
    if files:
        extra = ", ".join(sorted(files)[:5])
        raise ArchiveError(f"the archive holds files {MANIFEST_MEMBER} does not list: {extra}")
    return tuple(tools)
