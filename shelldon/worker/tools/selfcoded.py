"""Discovery of live self-coded tools, run in each forked worker at the start of a turn.

The worker cannot reach the store, and the toolbox is read-only to it, so the approved hashes
reach discovery through ``<home>/toolbox/live/manifest.json``, which only the service writes
(at every promote, quarantine, restore and start-up): one JSON read per turn, no module
imported. Each entry becomes a FREE ``ToolSpec(self_coded=True)`` whose module is imported
only when the model calls it, in a child (``isolation``), from bytes read once whose sha256
must equal the approved hash: bytes that differ never run (the call fails, a strike). Entries
the manifest marks tampered or broken are skipped and logged (they never run, so they are no
call's failure); files it does not list are ignored and logged; a missing or corrupt manifest
means no self-coded tools: nothing found on disk is offered.

Where no filesystem layer is in force (``ToolContext.selfcoded_off``), nothing is discovered;
and a self-coded tool refuses to run in a process whose filesystem layer is not on
(``sandbox.filesystem_confined``), such as a resumed worker before its approved call is done.

The last result is kept per process and reused while the manifest's bytes and the directory's
``*.py`` names are unchanged, so a worker forked after its parent discovered pays ~0.3 ms.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import structlog

from shelldon.contracts import Tier, ToolDefinition
from shelldon.proc import sandbox
from shelldon.toolbox.manifest import (
    MANIFEST_NAME,
    Manifest,
    ManifestError,
    code_hash,
    parse_manifest,
)
from shelldon.toolbox.tool_files import ToolFileError, read_tool_bytes
from shelldon.worker.tools.isolation import run_isolated
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolFn, ToolSpec

log = structlog.get_logger(__name__)

MODULE_PREFIX = "shelldon_selfcoded_"


class SelfCodedToolError(Exception):
    """A self-coded module could not be loaded or breaks the convention (a strike, not a
    ``ToolError``: the tool itself is at fault)."""


def load_module(path: Path, expected_hash: str) -> ModuleType:
    """Import a live tool from ``path`` if its code still hashes to ``expected_hash`` (the
    approved hash), and check it offers ``run``, ``DESCRIPTION`` and ``PARAMS_SCHEMA``."""
    try:
        data = read_tool_bytes(path)
    except ToolFileError as exc:
        log.warning("selfcoded_module_refused", file=path.name, error=str(exc))
        raise SelfCodedToolError(f"cannot load {path.name}: {exc}") from None
    if code_hash(data) != expected_hash:
        log.warning("selfcoded_module_tampered", file=path.name, expected=expected_hash)
        raise SelfCodedToolError(
            f"{path.name} is not the code the owner approved (its code hash differs); "
            "it was not run: propose it again to change a tool"
        )
    name = f"{MODULE_PREFIX}{path.stem}_{expected_hash[:12]}"
    cached = sys.modules.get(name)
    if cached is not None:
        return cached
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None:
        raise SelfCodedToolError(f"cannot load {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        # Execute the verified bytes, not a second read of the file.
        exec(compile(data, str(path), "exec"), module.__dict__)  # noqa: S102
    except BaseException:
        sys.modules.pop(name, None)
        raise
    problems = []
    if not callable(getattr(module, "run", None)):
        problems.append("run is not a function")
    if not isinstance(getattr(module, "DESCRIPTION", None), str):
        problems.append("DESCRIPTION is not a string")
    if not isinstance(getattr(module, "PARAMS_SCHEMA", None), dict):
        problems.append("PARAMS_SCHEMA is not a dict")
    if problems:
        sys.modules.pop(name, None)
        raise SelfCodedToolError(f"{path.name} breaks the tool convention: {', '.join(problems)}")
    return module


def confinement_refusal(ctx: ToolContext) -> str:
    """Why a self-coded tool may not run in this process now ("" when it may)."""
    if ctx.selfcoded_off:
        return ctx.selfcoded_off
    if ctx.require_fs_layer and not sandbox.filesystem_confined():
        return (
            "self-coded tools run only under the filesystem sandbox, which is not on in "
            "this process"
        )
    return ""


def _tool_fn(tools_dir: Path, file: str, expected_hash: str) -> ToolFn:
    def call(ctx: ToolContext, **args: Any) -> str:
        refusal = confinement_refusal(ctx)
        if refusal:
            log.warning("selfcoded_tool_refused", file=file, why=refusal)
            raise ToolError(refusal)
        # The Path is built at call time: pathlib costs ~10 us, times 500 tools every turn.
        path = tools_dir / file
        # Never in this process: the tool runs in a child of the worker (isolation.py).
        return run_isolated(
            lambda: load_module(path, expected_hash), path.stem, args, ctx.max_output_chars
        )

    return call


def _load_manifest(tools_dir: Path, raw: bytes | None) -> Manifest | None:
    """The manifest the toolbox wrote, or None (logged) when it is missing or corrupt: then no
    self-coded tool is offered, whatever the directory holds."""
    try:
        if raw is None:
            raise ManifestError(f"no manifest in {tools_dir}")
        return parse_manifest(raw, str(tools_dir / MANIFEST_NAME))
    except ManifestError as exc:
        log.warning("selfcoded_manifest_unusable", error=str(exc), offered="none")
        return None


@dataclass(frozen=True, slots=True)
class _Seen:
    """The last discovery result and the exact inputs it was built from."""

    tools_dir: Path
    raw: bytes
    on_disk: frozenset[str]
    specs: tuple[ToolSpec, ...]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: reading the manifest allocates thousands of small containers that
    would trigger collections walking the whole heap (the p95 cost), and frees no cycle."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Discovery:
    """Discovery that keeps its last result and the exact inputs it was built from. The zygote
    holds one and discovers before every fork; the worker, handed the same object
    (``build_registry``), then only reads the manifest bytes and lists the dir, and rebuilds
    when either differs in any byte or name."""

    def __init__(self) -> None:
        self.seen: _Seen | None = None
        self.told_off = False  # said once: the start log and doctor say it too

    @_gc_paused()
    def __call__(self, ctx: ToolContext) -> list[ToolSpec]:
        tools_dir = ctx.live_tools
        if tools_dir is None:
            return []
        if ctx.selfcoded_off:
            if not self.told_off:
                self.told_off = True
                log.warning("selfcoded_tools_off", why=ctx.selfcoded_off)
            return []
        raw, on_disk = _read_inputs(tools_dir)
        if raw is None and not on_disk:
            return []  # an empty toolbox (nothing promoted yet): nothing to read, nothing wrong
        seen = self.seen
        if seen and (seen.tools_dir, seen.raw, seen.on_disk) == (tools_dir, raw, on_disk):
            return list(seen.specs)
        manifest = _load_manifest(tools_dir, raw)
        if manifest is None:
            return []
        specs = _build(tools_dir, manifest, on_disk)
        if raw is not None:
            self.seen = _Seen(tools_dir, raw, on_disk, tuple(specs))
        return specs


def discover(ctx: ToolContext, discovery: Discovery | None = None) -> list[ToolSpec]:
    """The live self-coded tools as FREE specs (broken modules are logged and left out); with
    ``discovery``, its last result when the toolbox did not change since."""
    return (discovery or Discovery())(ctx)


Fingerprint = tuple[bool, bytes | None, frozenset[str]]
"""What discovery reads: whether the live directory exists (a worker confined before it was
made cannot read it once it is), the live manifest's bytes (None: no manifest) and the
``*.py`` names."""


def toolbox_fingerprint(ctx: ToolContext) -> Fingerprint:
    """The inputs discovery builds the live toolbox from, as ``Discovery`` reads them: equal
    fingerprints give equal discovery results. A worker forked ahead of its turn compares it to
    decide whether its registry is stale. Raises ``OSError`` as ``discover``."""
    tools_dir = ctx.live_tools
    if tools_dir is None or ctx.selfcoded_off:
        return False, None, frozenset()
    return tools_dir.is_dir(), *_read_inputs(tools_dir)


def _read_inputs(tools_dir: Path) -> tuple[bytes | None, frozenset[str]]:
    try:
        raw: bytes | None = (tools_dir / MANIFEST_NAME).read_bytes()
    except OSError:
        raw = None
    try:
        on_disk = frozenset(n for n in os.listdir(tools_dir) if n.endswith(".py"))
    except (FileNotFoundError, PermissionError):
        # Missing, or made after this worker was confined (its rules could not name it): no
        # tools it can load. The fingerprint tells the zygote such a spare is stale.
        on_disk = frozenset()
    return raw, on_disk


def _build(tools_dir: Path, manifest: Manifest, on_disk: frozenset[str]) -> list[ToolSpec]:
    specs: list[ToolSpec] = []
    listed: set[str] = set()
    for entry in manifest.entries:
        valid_name = entry.name.isidentifier() and entry.name.isascii()
        if not valid_name or entry.file != f"{entry.name}.py":
            log.warning("selfcoded_manifest_entry_refused", tool=entry.name, file=entry.file)
            continue
        listed.add(entry.file)
        if entry.file not in on_disk:
            log.warning("selfcoded_module_missing", tool=entry.name, file=entry.file)
            continue
        definition = ToolDefinition(entry.name, entry.description, entry.params_schema, Tier.FREE)
        fn = _tool_fn(tools_dir, entry.file, entry.code_hash)
        specs.append(ToolSpec(definition, fn, self_coded=True))
    for broken in manifest.broken:
        listed.add(broken.file)
        if broken.file in on_disk:
            log.warning("selfcoded_module_broken", tool=broken.name, error=broken.error)
    for bad in manifest.tampered:
        # Not the approved bytes: never offered, never a strike (the tool did not run).
        listed.add(bad.file)
        log.warning("selfcoded_module_tampered", tool=bad.name, error=bad.error)
    unlisted = sorted(on_disk - listed)
    if unlisted:
        log.warning("selfcoded_modules_not_in_manifest", files=unlisted[:20], count=len(unlisted))
    return specs
