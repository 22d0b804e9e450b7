"""FREE file tools: ``read_file`` (first 64 KiB of a text file) and ``list_dir``, both jailed.

Every path goes through ``jail_path``; the resolved path is then opened beneath the workspace
with no symlink followed (``open_jailed``) and re-checked on the open descriptor, so what is
read is what was checked, even if a directory on the way is swapped for a symlink meanwhile.
"""

from __future__ import annotations

import errno
import os
import stat

from shelldon.contracts import Tier, ToolDefinition
from shelldon.worker.tools.jail import is_denied, jail_path, open_jailed, refuse_hard_link
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolSpec, string_params

# The seed's read cap: enough for a source file or a note, never a whole log.
READ_CAP_BYTES = 64 * 1024

# A listing longer than this is cut: the model should list a subdirectory instead.
LIST_CAP_ENTRIES = 500


def _open_failed(path: str, exc: OSError) -> ToolError:
    """The model's message for an open that the resolved path no longer allows."""
    if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
        return ToolError(
            f"{path!r} cannot be opened as resolved: a symlink stands on the way (a symlink "
            "loop, or the path changed while it was being opened); refused"
        )
    return ToolError(f"cannot open {path!r}: {exc.strerror}")


def _read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd`` (fewer only at end of file)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, limit - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_file(ctx: ToolContext, path: str) -> str:
    """The text of a workspace file, cut at 64 KiB with a note saying how much was left out."""
    jailed = jail_path(ctx.workspace, path, ctx.vault)
    try:
        fd = open_jailed(jailed, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ToolError(
            f"no file {path!r} in the workspace; list_dir('.') shows what exists"
        ) from None
    except OSError as exc:
        raise _open_failed(path, exc) from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise ToolError(f"{path!r} is a directory; use list_dir to see inside it")
        if not stat.S_ISREG(info.st_mode):
            raise ToolError(f"{path!r} is not a regular file (device, pipe or socket); refused")
        refuse_hard_link(path, info)
        data = _read_at_most(fd, READ_CAP_BYTES + 1)
    finally:
        os.close(fd)
    if b"\x00" in data[:8192]:
        raise ToolError(f"{path!r} looks like a binary file; read_file reads text only")
    if len(data) > READ_CAP_BYTES:
        text = data[:READ_CAP_BYTES].decode("utf-8", errors="replace")
        return text + (
            f"\n…[read_file shows the first {READ_CAP_BYTES} bytes of {info.st_size}; "
            "the rest was left out]"
        )
    return data.decode("utf-8", errors="replace")


def _describe(entry: os.DirEntry[str]) -> str:
    """One listing line: directories end in '/', symlinks in '@', files show their size."""
    try:
        info = entry.stat(follow_symlinks=False)
    except OSError:
        return f"{entry.name} (unreadable)"
    if stat.S_ISLNK(info.st_mode):
        return f"{entry.name}@"
    if stat.S_ISDIR(info.st_mode):
        return f"{entry.name}/"
    if stat.S_ISREG(info.st_mode):
        return f"{entry.name} ({info.st_size} bytes)"
    return f"{entry.name} (special file)"


def list_dir(ctx: ToolContext, path: str = ".") -> str:
    """The entries of a workspace directory, sorted; deny-listed names are left out and counted."""
    jailed = jail_path(ctx.workspace, path, ctx.vault)
    if not jailed.real.is_dir():
        if jailed.real.exists():
            raise ToolError(f"{path!r} is a file, not a directory; use read_file to read it")
        raise ToolError(f"no directory {path!r} in the workspace; list_dir('.') shows the root")
    try:
        fd = open_jailed(jailed, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _open_failed(path, exc) from None
    try:
        with os.scandir(fd) as entries:
            found = sorted(entries, key=lambda e: e.name)
        shown = [e for e in found if is_denied(jailed.inside / e.name) is None]
        # Entries of a descriptor's listing stat through it: describe them while it is open.
        lines = [_describe(e) for e in shown[:LIST_CAP_ENTRIES]]
    except OSError as exc:
        raise ToolError(f"cannot list {path!r}: {exc.strerror}") from None
    finally:
        os.close(fd)
    hidden = len(found) - len(shown)
    if len(shown) > LIST_CAP_ENTRIES:
        lines.append(f"…[{len(shown) - LIST_CAP_ENTRIES} more entries; list a subdirectory]")
    if hidden:
        lines.append(f"({hidden} deny-listed entries not shown)")
    return "\n".join(lines) or f"{path!r} is empty"


def specs() -> list[ToolSpec]:
    """The FREE file tools."""
    return [
        ToolSpec(
            ToolDefinition(
                name="read_file",
                description=(
                    "Read a text file in the workspace (first 64 KiB). The path is relative "
                    "to the workspace root, e.g. 'notes/todo.txt'."
                ),
                params_schema=string_params(path="file path relative to the workspace root"),
                tier=Tier.FREE,
            ),
            read_file,
        ),
        ToolSpec(
            ToolDefinition(
                name="list_dir",
                description=(
                    "List a directory in the workspace: subdirectories end in '/', symlinks "
                    "in '@', files show their size. '.' is the workspace root."
                ),
                params_schema={
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "directory path relative to the workspace root",
                        }
                    },
                    "additionalProperties": False,
                },
                tier=Tier.FREE,
            ),
            list_dir,
        ),
    ]
