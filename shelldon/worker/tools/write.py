"""RISKY ``write_file``: write a text file in the workspace, atomically, never into git's machinery.

The path goes through the jail and the deny list like every file tool. On top of that, git's
control files are refused anywhere in the workspace: any path through a ``.git`` component
(``.git/config``, ``.git/hooks/``, ``.git/info/attributes``, or a ``.git`` *file*, which can
point the repository at any directory), and ``.gitmodules`` files. ``.gitattributes`` may be
written: an attribute only names a filter or a driver, which repository config would have to
define, and before every approved git call the git tool refuses both a config that defines one
and an attributes file that names one (``gitconfig``), so a written ``.gitattributes`` arms
nothing.

A symlink that stays inside the workspace is followed: its resolved target is what the deny
list and the git rules judge, and what is replaced (a temp file in its directory, fsynced,
renamed over it, the directory fsynced: a crash leaves the old file or the new one, never half
of one). The directory is opened beneath the workspace with no symlink followed
(``make_dirs_beneath``), so a symlink swapped in after the jail's judgement cannot redirect it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
import unicodedata
from pathlib import PurePath, PurePosixPath

from shelldon.contracts import Tier, ToolDefinition
from shelldon.proc.beneath import make_dirs_beneath
from shelldon.worker.tools.jail import jail_path
from shelldon.worker.tools.registry import ToolContext, ToolError, ToolSpec, string_params

WRITE_CAP_BYTES = 64 * 1024

# Names git reads its behaviour from, refused as any path component (compared case-folded, and
# with the trailing dots and spaces Windows-style filesystems drop, as git's own checks do).
GIT_DIR_NAMES = frozenset({".git", "git~1"})
GIT_CONTROL_NAMES = GIT_DIR_NAMES | {".gitmodules"}


def git_control_reason(
    path: str | PurePath, names: frozenset[str] = GIT_CONTROL_NAMES
) -> str | None:
    """Why ``path`` would touch git's control files (one of ``names``), or None if it does not."""
    for part in PurePosixPath(path).parts:
        folded = unicodedata.normalize("NFKC", part).casefold().rstrip(". ")
        if folded in names:
            return (
                f"'{path}' is refused: {part} controls what git runs (hooks, config, "
                "submodules); change git settings by asking the owner"
            )
    return None


def _existing_mode(name: str, dir_fd: int) -> int:
    """The permission bits to give the new file: the old file's, or 0o644 for a new one."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return 0o644
    if stat.S_ISLNK(info.st_mode):
        raise ToolError(
            f"{name!r} is a symlink that does not resolve (a loop), or one that appeared after "
            "the path was resolved; refused"
        )
    if not stat.S_ISREG(info.st_mode):
        raise ToolError(f"{name!r} exists and is not a regular file; refused")
    if info.st_nlink > 1:
        raise ToolError(f"{name!r} has {info.st_nlink} hard links; refused")
    return stat.S_IMODE(info.st_mode) & 0o777


def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Write ``content`` (UTF-8, at most 64 KiB) to ``path`` in the workspace, atomically."""
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"content is not valid text ({exc.reason} at {exc.start})") from None
    if len(data) > WRITE_CAP_BYTES:
        raise ToolError(
            f"content is {len(data)} bytes; write_file takes at most {WRITE_CAP_BYTES} bytes "
            "(split the file or write it in parts)"
        )
    reason = git_control_reason(path)
    if reason:
        raise ToolError(reason)
    requested = PurePosixPath(path)
    if not requested.name or requested.name in (".", ".."):
        raise ToolError(f"{path!r} names no file; give a path like 'notes/todo.txt'")
    jailed = jail_path(ctx.workspace, path, ctx.vault)
    inside = jailed.inside
    problem = git_control_reason(inside)
    if problem:
        raise ToolError(problem)
    if not inside.name:
        raise ToolError(f"{path!r} is the workspace itself; give a path like 'notes/todo.txt'")
    try:
        root_fd = os.open(jailed.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            dir_fd = make_dirs_beneath(root_fd, inside.parent)
        finally:
            os.close(root_fd)
        try:
            _replace(inside.name, data, dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
            raise ToolError(
                f"cannot write {path!r}: a symlink or a file stands where a directory should be "
                "(or the path changed while it was being opened); refused"
            ) from None
        raise ToolError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    return f"wrote {len(data)} bytes to {path}"


def _replace(name: str, data: bytes, dir_fd: int) -> None:
    mode = _existing_mode(name, dir_fd)
    temp = f".{name}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=dir_fd)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=dir_fd)
        raise
    os.fsync(dir_fd)


def specs() -> list[ToolSpec]:
    """The write family: ``write_file`` (RISKY)."""
    definition = ToolDefinition(
        name="write_file",
        description=(
            "Create or replace a text file in the workspace (at most 64 KiB; parent directories "
            "are created). Git's control files (.git/, .gitmodules) are refused."
        ),
        params_schema=string_params(
            path="file path relative to the workspace root",
            content="the whole new text of the file",
        ),
        tier=Tier.RISKY,
    )
    return [ToolSpec(definition, write_file)]
