"""Writing files durably (the toolbox's, and the config ``shelldon pair`` edits): a reader sees
the old file or the new one, never half of one, and what was written survives power loss."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(
    path: Path, data: bytes, *, mode: int = 0o600, owner: tuple[int, int] | None = None
) -> None:
    """Replace ``path`` with ``data`` (``mode``, and ``owner`` as uid and gid if given): temp
    file, fsync, rename, fsync of the directory. A symlink put at ``path`` is replaced, never
    followed."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if owner is not None and owner != (os.geteuid(), os.getegid()):
                os.fchown(fh.fileno(), *owner)
            os.fchmod(fh.fileno(), mode)
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


def write_new(path: Path, data: bytes) -> None:
    """Create ``path`` (it must not exist) holding ``data``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
