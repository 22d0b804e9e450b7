"""What to allow: the paths a worker or gate run may read, and may write, and what it never sees."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable
from pathlib import Path

import structlog

from shelldon.config import Settings
from shelldon.proc.sandbox.policy import _DEVICES, _ETC_FILES, _READ_ONLY_ROOTS

log = structlog.get_logger(__name__)


def _python_paths() -> list[str]:
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    paths.add(os.path.dirname(os.path.realpath(sys.executable)))
    paths.add(os.path.dirname(sys.executable))
    for entry in sys.path:
        if entry and os.path.isdir(entry):
            paths.add(os.path.abspath(entry))
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue
        name = getattr(module, "__name__", "")
        top = sys.modules.get(name.split(".", 1)[0])
        top_file = getattr(top, "__file__", None)
        if isinstance(top_file, str) and os.path.basename(top_file) == "__init__.py":
            paths.add(os.path.dirname(os.path.abspath(top_file)))
        else:
            paths.add(os.path.dirname(os.path.abspath(file)))
    return sorted(paths)


def _is_within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def allowed_paths(
    writable: Iterable[Path], never: Iterable[Path], extra_read: Iterable[str] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(read-only, read-write) path lists. A read-only path that contains a writable one (the
    home around the workspace) or one of ``never`` (vault, database, ~/.ssh) is dropped."""
    rw = tuple(os.path.realpath(p) for p in writable)
    banned = tuple(os.path.realpath(p) for p in never) + rw
    candidates = [*_READ_ONLY_ROOTS, *_ETC_FILES, *_python_paths(), *extra_read]
    ro: list[str] = []
    for raw in candidates:
        path = os.path.realpath(raw)
        if any(_is_within(b, path) for b in banned) or any(_is_within(path, w) for w in rw):
            continue
        if path not in ro and os.path.exists(path):
            ro.append(path)
    # A path inside another allowed one adds nothing but a rule (and a syscall per turn).
    ro = [p for p in ro if not any(q != p and _is_within(p, q) for q in ro)]
    return tuple(ro), rw + tuple(d for d in _DEVICES if os.path.exists(d))


def never_paths(settings: Settings) -> tuple[Path, ...]:
    """What a worker never sees, even where a read-only root contains it. The toolbox among
    them: a worker reads its live tools (``live_tools_read``) and nothing else of it."""
    return (
        settings.vault,
        settings.database,
        settings.toolbox,
        Path.home() / ".ssh",
        Path("/etc/shadow"),
    )


def live_tools_read(settings: Settings) -> tuple[str, ...]:
    """The live self-coded tools, the one part of the toolbox a worker may read (read-only).
    A rule can only name a directory that exists: whether it does is part of the answer, so a
    toolbox made after the first worker still reaches the next one."""
    live = settings.live_tools
    return (str(live),) if live.is_dir() else ()


def gate_never(staging: Path) -> tuple[Path, ...]:
    """What a gate run of ``staging`` (``<home>/toolbox/staging/<run>``) must never see, even
    inside a read-only path: the home's vault, database and the rest of the toolbox."""
    toolbox = staging.parent.parent
    home = toolbox.parent
    return (home / "vault", home / "shelldon.db", toolbox, Path.home() / ".ssh")


@functools.cache
def worker_paths(
    workspace: Path, never: tuple[Path, ...], read: tuple[str, ...] = ()
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(read-only, read-write) for a worker of ``workspace``, also reading ``read`` (computed
    once per input)."""
    return allowed_paths((workspace,), never, read)
