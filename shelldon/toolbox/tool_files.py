"""Reading a toolbox file as code, safely: no link followed, no special file opened, nothing
over the size limit read."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

MAX_TOOL_BYTES = 64 * 1024
"""The largest tool module or test the toolbox holds (the gate refuses bigger proposals)."""


class ToolFileError(ValueError):
    """A toolbox file that must not be read as code: a link, a special file, too big, gone."""


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


def read_or_empty(path: Path) -> bytes:
    """``read_tool_bytes(path)``, or b"" for a file that is missing or must not be read."""
    try:
        return read_tool_bytes(path)
    except ToolFileError:
        return b""


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
