"""FREE file tools: ``read_file`` (first 64 KiB of a text file) and ``list_dir``, both jailed.

Every path goes through ``resolve_in_jail``; the file is then opened without following a final
symlink and re-checked on the open descriptor, so what is read is what was checked.
"""

from __future__ import annotations

import os
import stat

from shelldon.contracts import Tier, ToolDefinition
from shelldon.worker.tools.jail import denied_name, refuse_hard_link, resolve_in_jail
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolSpec

# The seed's read cap: enough for a source file or a note, never a whole log.
READ_CAP_BYTES = 64 * 1024

# A listing longer than this is cut: the model should list a subdirectory instead.
LIST_CAP_ENTRIES = 500


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
    real = resolve_in_jail(ctx.workspace, path, ctx.vault)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise ToolError(
            f"no file {path!r} in the workspace; list_dir('.') shows what exists"
        ) from None
    except IsADirectoryError:
        raise ToolError(f"{path!r} is a directory; use list_dir to see inside it") from None
    except OSError as exc:
        raise ToolError(f"cannot open {path!r}: {exc.strerror}") from None
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
    real = resolve_in_jail(ctx.workspace, path, ctx.vault)
    if not real.is_dir():
        if real.exists():
            raise ToolError(f"{path!r} is a file, not a directory; use read_file to read it")
        raise ToolError(f"no directory {path!r} in the workspace; list_dir('.') shows the root")
    try:
        with os.scandir(real) as entries:
            found = sorted(entries, key=lambda e: e.name)
    except OSError as exc:
        raise ToolError(f"cannot list {path!r}: {exc.strerror}") from None
    shown = [e for e in found if denied_name(e.name) is None]
    hidden = len(found) - len(shown)
    lines = [_describe(e) for e in shown[:LIST_CAP_ENTRIES]]
    if len(shown) > LIST_CAP_ENTRIES:
        lines.append(f"…[{len(shown) - LIST_CAP_ENTRIES} more entries; list a subdirectory]")
    if hidden:
        lines.append(f"({hidden} deny-listed entries not shown)")
    if not lines:
        return f"{path!r} is empty"
    return "\n".join(lines)


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
                params_schema={
                    "type": "object",
                    "properties": {
                        "path": {
                            "type": "string",
                            "description": "file path relative to the workspace root",
                        }
                    },
                    "required": ["path"],
                    "additionalProperties": False,
                },
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
