"""The self-coded tool convention, read by AST, and the live manifest core writes from the
owner's approvals.

A tool module declares ``def run(**kwargs) -> str``, ``DESCRIPTION = "..."`` (a string literal)
and ``PARAMS_SCHEMA = {...}`` (a dict literal that is a JSON-schema object). ``read_declaration``
reads those from the source text; the gate uses it for its convention check.

``write_manifest`` writes ``<toolbox>/live/manifest.json`` from the approved code hashes (the
store's ``approved_tools``, passed in), never from what happens to be on disk: a live file
becomes an entry only when its bytes hash to its approval. Workers read the manifest (the live
directory is read-only to them under every filesystem layer) and build their self-coded tools
from it, one small JSON file per turn instead of hundreds of modules. A file that does not match
its approval (or is missing, a link, not a regular file) is listed as ``tampered``; an approved
file that no longer meets the convention is ``broken`` (discovery reports those as tool failures
so the strike ledger can quarantine them). A manifest that is missing or unreadable means no
self-coded tools until core writes it again: nothing falls back to the files on disk.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 2
MAX_TOOL_BYTES = 64 * 1024
"""The largest tool module or test the toolbox holds (the gate refuses bigger proposals)."""


class ManifestError(ValueError):
    """The manifest is missing or unreadable: discovery offers no self-coded tool."""


class ToolFileError(ValueError):
    """A toolbox file that must not be read as code: a link, a special file, too big, gone."""


@dataclass(frozen=True, slots=True)
class Declaration:
    """What a tool module declares for the model: its description and argument schema."""

    description: str
    params_schema: dict[str, Any]


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


def _is_json_value(value: Any) -> bool:
    if value is None or isinstance(value, str | bool | int | float):
        return True
    if isinstance(value, list):
        return all(_is_json_value(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_value(v) for k, v in value.items())
    return False


def schema_problems(schema: Any) -> list[str]:
    """What keeps ``schema`` from being a JSON-schema object for tool arguments (empty: fine)."""
    if not isinstance(schema, dict):
        return [f"PARAMS_SCHEMA must be a dict, got {type(schema).__name__}"]
    if not _is_json_value(schema):
        return [
            "PARAMS_SCHEMA must hold only JSON values (dicts with string keys, lists, strings, "
            "numbers, booleans, None): no tuples, sets or bytes"
        ]
    problems: list[str] = []
    if schema.get("type") != "object":
        problems.append('PARAMS_SCHEMA must have "type": "object"')
    props = schema.get("properties")
    if not isinstance(props, dict):
        problems.append('PARAMS_SCHEMA must have "properties": {...} (a dict, may be empty)')
        props = {}
    for key, value in props.items():
        if not isinstance(value, dict):
            problems.append(f"PARAMS_SCHEMA property {key!r} must be a dict like {{'type': ...}}")
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        problems.append('PARAMS_SCHEMA "required" must be a list of property names')
    else:
        missing = [r for r in required if r not in props]
        if missing:
            problems.append(
                f"PARAMS_SCHEMA requires {missing} but does not list them in properties"
            )
    return problems


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    """The value last assigned to ``name`` at module level (plain or annotated assignment)."""
    found: ast.expr | None = None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
        ) or (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value is not None
        ):
            found = node.value
    return found


def _run_problems(run: ast.FunctionDef, props: dict[str, Any]) -> list[str]:
    """Can ``run(**args)`` be called with the schema's properties as keywords?"""
    args = run.args
    problems: list[str] = []
    if args.posonlyargs:
        problems.append("run must not have positional-only parameters: it is called as run(**args)")
    named = [a.arg for a in args.args + args.kwonlyargs]
    if args.kwarg is None:
        unknown = [p for p in props if p not in named]
        if unknown:
            problems.append(
                f"PARAMS_SCHEMA properties {unknown} are not parameters of run "
                "(add them or a **kwargs)"
            )
    n_defaults = len(args.defaults)
    no_default = [a.arg for a in args.args[: len(args.args) - n_defaults]]
    no_default += [
        a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None
    ]
    undeclared = [p for p in no_default if p not in props]
    if undeclared:
        problems.append(
            f"run parameters {undeclared} have no default and are not in PARAMS_SCHEMA "
            "properties, so the model can never pass them"
        )
    return problems


def read_declaration(tree: ast.Module) -> tuple[Declaration | None, tuple[str, ...]]:
    """Read a tool module's convention from its AST: the declaration, or every problem found."""
    problems: list[str] = []
    run = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "run":
            run = node
    if run is None:
        problems.append("the module must define a module-level function: def run(**kwargs) -> str")
    elif isinstance(run, ast.AsyncFunctionDef):
        problems.append("run must be a plain def, not async def")
    description: str | None = None
    value = _assigned(tree, "DESCRIPTION")
    if value is None:
        problems.append('the module must set DESCRIPTION = "what the tool does" (a string literal)')
    elif not (isinstance(value, ast.Constant) and isinstance(value.value, str)):
        problems.append("DESCRIPTION must be a plain string literal (no f-string or expression)")
    elif not value.value.strip():
        problems.append("DESCRIPTION must not be empty: the model reads it to choose the tool")
    else:
        description = value.value
    schema: Any = None
    value = _assigned(tree, "PARAMS_SCHEMA")
    if value is None:
        problems.append(
            'the module must set PARAMS_SCHEMA = {"type": "object", "properties": {...}}'
        )
    elif not isinstance(value, ast.Dict):
        problems.append("PARAMS_SCHEMA must be a dict literal")
    else:
        try:
            schema = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            problems.append("PARAMS_SCHEMA must be a dict of literals only (no names or calls)")
        else:
            problems.extend(schema_problems(schema))
    if isinstance(run, ast.FunctionDef) and isinstance(schema, dict) and not problems:
        problems.extend(_run_problems(run, schema.get("properties") or {}))
    if problems or description is None or not isinstance(schema, dict):
        return None, tuple(problems)
    return Declaration(description, schema), ()


def parse_module(source: str, filename: str) -> tuple[ast.Module | None, str]:
    """Parse ``source``; on failure return the error with its line number for the model."""
    try:
        return ast.parse(source, filename=filename), ""
    except SyntaxError as exc:
        return None, f"{filename}:{exc.lineno}: syntax error: {exc.msg}"
    except (ValueError, MemoryError, RecursionError) as exc:
        return None, f"{filename}: cannot be parsed: {exc}"


def read_tool_bytes(path: Path, limit: int = MAX_TOOL_BYTES) -> bytes:
    """The bytes of the toolbox file ``path``, refusing a symlink (``O_NOFOLLOW``), a hard link
    (a second name someone else may write through), a FIFO or device (opened non-blocking, so
    one cannot hang the reader) and anything over ``limit`` bytes: ``ToolFileError`` says why."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ToolFileError(f"{path.name} is missing") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ToolFileError(f"{path.name} is a symbolic link") from None
        raise ToolFileError(f"{path.name} cannot be read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ToolFileError(f"{path.name} is not a regular file")
        if st.st_nlink != 1:
            raise ToolFileError(f"{path.name} has {st.st_nlink} names (a hard link)")
        if st.st_size > limit:
            raise ToolFileError(f"{path.name} is {st.st_size} bytes, over {limit}")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, limit + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ToolFileError(f"{path.name} grew over {limit} bytes while being read")
        return b"".join(chunks)
    finally:
        os.close(fd)


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


def describe_file(path: Path) -> ManifestEntry | BrokenModule:
    """Read one module's declaration from disk (safely, AST only): an entry or why not."""
    try:
        data = read_tool_bytes(path)
    except ToolFileError as exc:
        return BrokenModule(path.stem, path.name, f"cannot read: {exc}")
    return describe_source(path.stem, path.name, data)


def module_files(tools_dir: Path) -> list[Path]:
    """The candidate tool modules in ``tools_dir``: ``<identifier>.py`` names, sorted."""
    try:
        names = os.listdir(tools_dir)
    except FileNotFoundError:
        return []
    return [
        tools_dir / n
        for n in sorted(names)
        if n.endswith(".py") and n[:-3].isidentifier() and n[:-3].isascii()
    ]


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
        "tools": [
            {
                "name": e.name,
                "description": e.description,
                "params_schema": e.params_schema,
                "file": e.file,
                "code_hash": e.code_hash,
            }
            for e in manifest.entries
        ],
        "broken": [{"name": b.name, "file": b.file, "error": b.error} for b in manifest.broken],
        "tampered": [{"name": b.name, "file": b.file, "error": b.error} for b in manifest.tampered],
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


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a reader sees the old file or the new one, never a torn one,
    and the new one survives power loss (temp file, fsync, rename, fsync of the directory)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make renames in ``directory`` durable."""
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


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
