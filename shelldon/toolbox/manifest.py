"""The live manifest the toolbox writes from the owner's approvals.

``<toolbox>/live/manifest.json`` is written from the approved code hashes, never from what
happens to be on disk: a live file becomes an entry only when its bytes hash to its approval.
Workers build their self-coded tools from it, one small JSON file per turn instead of hundreds
of modules. A file that is not its approval (or is missing, a link, not a regular file) is
``tampered``; approved bytes that break the convention are ``broken`` (discovery reports those
as tool failures, so the strike ledger can quarantine them). A missing or unreadable manifest
means no self-coded tools until the toolbox writes it again: nothing falls back to the files.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import structlog

from shelldon.toolbox.atomic import write_atomic
from shelldon.toolbox.convention import parse_module, read_declaration
from shelldon.toolbox.tool_files import ToolFileError, read_tool_bytes

log = structlog.get_logger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 2


class ManifestError(ValueError):
    """The manifest is missing or unreadable: discovery offers no self-coded tool."""


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One live tool: its name (the module stem), declaration, file name and sha256 of its code."""

    name: str
    description: str
    params_schema: dict[str, Any]
    file: str
    code_hash: str


@dataclass(frozen=True, slots=True)
class BrokenModule:
    """A live module that cannot be offered to the model, and why."""

    name: str
    file: str
    error: str


@dataclass(frozen=True, slots=True)
class Manifest:
    """Every approved live tool: the usable ones (``entries``), the ``broken`` ones (approved
    bytes that break the convention) and the ``tampered`` ones (the file is not what the owner
    approved, or is missing)."""

    entries: tuple[ManifestEntry, ...] = ()
    broken: tuple[BrokenModule, ...] = ()
    tampered: tuple[BrokenModule, ...] = ()


def code_hash(code: str | bytes) -> str:
    """The sha256 hex digest of a module's source (UTF-8): what the owner approved."""
    data = code.encode("utf-8") if isinstance(code, str) else code
    return hashlib.sha256(data).hexdigest()


def describe_source(name: str, file: str, data: bytes) -> ManifestEntry | BrokenModule:
    """Read one module's declaration from its bytes (AST only): a manifest entry or why not."""
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return BrokenModule(name, file, f"not UTF-8: {exc}")
    tree, error = parse_module(source, file)
    if tree is None:
        return BrokenModule(name, file, error)
    decl, problems = read_declaration(tree)
    if decl is None:
        return BrokenModule(name, file, "; ".join(problems))
    return ManifestEntry(name, decl.description, decl.params_schema, file, code_hash(data))


def build_manifest(
    live_dir: Path, approved: Mapping[str, str], previous: Manifest | None = None
) -> Manifest:
    """The manifest of ``approved`` (live tool name -> approved code hash): each tool whose file
    in ``live_dir`` holds exactly the approved bytes is described; any other is ``tampered``.
    Entries of ``previous`` with the same file and hash are reused (a promotion with hundreds
    of live tools parses only what changed)."""
    known = {(e.file, e.code_hash): e for e in previous.entries} if previous else {}
    entries: list[ManifestEntry] = []
    broken: list[BrokenModule] = []
    tampered: list[BrokenModule] = []
    for name in sorted(approved):
        file, wanted = f"{name}.py", approved[name]
        try:
            data = read_tool_bytes(live_dir / file)
        except ToolFileError as exc:
            tampered.append(BrokenModule(name, file, str(exc)))
            continue
        if code_hash(data) != wanted:
            tampered.append(BrokenModule(name, file, f"{file} is not the code the owner approved"))
            continue
        described = known.get((file, wanted)) or describe_source(name, file, data)
        if isinstance(described, ManifestEntry):
            entries.append(described)
        else:
            broken.append(described)
    return Manifest(tuple(entries), tuple(broken), tuple(tampered))


def _to_json(manifest: Manifest) -> dict[str, Any]:
    return {
        "format": MANIFEST_FORMAT,
        "tools": [asdict(e) for e in manifest.entries],
        "broken": [asdict(b) for b in manifest.broken],
        "tampered": [asdict(b) for b in manifest.tampered],
    }


def _from_json(data: Any) -> Manifest:
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        raise ManifestError(f"manifest is not format {MANIFEST_FORMAT}")
    tools, broken, tampered = data.get("tools"), data.get("broken"), data.get("tampered")
    if not (isinstance(tools, list) and isinstance(broken, list) and isinstance(tampered, list)):
        raise ManifestError("manifest lacks its tools/broken/tampered lists")
    entries: list[ManifestEntry] = []
    # Runs in every worker each turn: plain loops and type checks, no helper calls per field.
    for item in tools:
        try:
            name, desc = item["name"], item["description"]
            schema, file, digest = item["params_schema"], item["file"], item["code_hash"]
        except (TypeError, KeyError):
            raise ManifestError(f"manifest tool entry is malformed: {item!r:.80}") from None
        if not (
            type(name) is str
            and type(desc) is str
            and type(schema) is dict
            and type(file) is str
            and type(digest) is str
        ):
            raise ManifestError(f"manifest tool entry has wrong types: {item!r:.80}")
        entries.append(ManifestEntry(name, desc, schema, file, digest))
    return Manifest(tuple(entries), _modules(broken, "broken"), _modules(tampered, "tampered"))


def _modules(items: list[Any], what: str) -> tuple[BrokenModule, ...]:
    found: list[BrokenModule] = []
    for item in items:
        try:
            fields = (item["name"], item["file"], item["error"])
        except (TypeError, KeyError):
            raise ManifestError(f"manifest {what} entry is malformed: {item!r:.80}") from None
        if not all(type(f) is str for f in fields):
            raise ManifestError(f"manifest {what} entry has wrong types: {item!r:.80}")
        found.append(BrokenModule(*fields))
    return tuple(found)


def read_manifest(tools_dir: Path) -> Manifest:
    """Load ``<tools_dir>/manifest.json``; raise ``ManifestError`` when missing or corrupt."""
    path = tools_dir / MANIFEST_NAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ManifestError(f"no manifest at {path}") from None
    except OSError as exc:
        raise ManifestError(f"cannot read {path}: {exc}") from None
    return parse_manifest(raw, str(path))


def parse_manifest(raw: bytes, where: str = MANIFEST_NAME) -> Manifest:
    """Decode a manifest's bytes; raise ``ManifestError`` (naming ``where``) when corrupt."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ManifestError(f"{where} is not valid JSON: {exc}") from None
    return _from_json(data)


def write_manifest(live_dir: Path, approved: Mapping[str, str]) -> Manifest:
    """Describe ``approved`` (see ``build_manifest``) and atomically replace the manifest in
    ``live_dir``; returns what was written. Only ``shelldon.toolbox.toolbox`` calls this."""
    try:
        previous: Manifest | None = read_manifest(live_dir)
    except ManifestError:
        previous = None
    manifest = build_manifest(live_dir, approved, previous)
    payload = json.dumps(_to_json(manifest), ensure_ascii=False, separators=(",", ":"))
    write_atomic(live_dir / MANIFEST_NAME, payload.encode("utf-8"))
    log.info(
        "manifest_written",
        tools=len(manifest.entries),
        broken=len(manifest.broken),
        tampered=len(manifest.tampered),
    )
    for bad in manifest.tampered:
        log.warning("selfcoded_module_tampered", tool=bad.name, error=bad.error)
    return manifest
