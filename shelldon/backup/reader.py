"""Reading a backup at restore: the archive is hostile until it has been checked whole.

``unpack_backup`` streams the archive into a fresh directory of the caller's (never anywhere
else) and checks everything before the caller moves a byte of it into the home: each member's
name through the same guard as ``tools import`` (no absolute name, ``..``, link, device or
other special file), then against the backup layout; sizes against the caps and the free
space; every file against its size and sha256 in ``backup.json``, with nothing missing and
nothing extra; the database's schema (``check_foreign_database``); and the toolbox archive
inside through ``read_archive``. Any failure raises ``BackupError``; the caller removes the
directory.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shelldon.backup.layout import (
    BACKUP_FORMAT,
    CONFIG_MEMBER,
    DATABASE_MEMBER,
    INDEX_MEMBER,
    TOOLBOX_MEMBER,
    WORKSPACE_DIR,
    BackupError,
    BackupLimits,
    member_cap,
    member_kind,
)
from shelldon.store import StoreError, check_foreign_database
from shelldon.toolbox.archive import (
    ArchivedTool,
    ArchiveError,
    checked_member_name,
    read_archive,
)

_CHUNK = 256 * 1024
_MAX_EXTENDED_HEADER = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Unpacked:
    """A checked backup, unpacked in ``root``: what it says about itself and what it holds."""

    root: Path
    created_at: float
    shelldon_version: str
    schema_version: int
    tools: tuple[ArchivedTool, ...]
    quarantined: tuple[tuple[str, str], ...]
    has_config: bool
    workspace_files: int


class _BoundedTarInfo(tarfile.TarInfo):
    """Refuses a pax or GNU long-name header bigger than 1 MB: tarfile reads those whole into
    memory, so a hostile one could take all of a Pi's."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        extended = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
        big = self.size > _MAX_EXTENDED_HEADER
        if big and self.type in (*extended, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK):
            raise tarfile.HeaderError(f"an extended header of {self.size} bytes")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


def _make_dirs(root: Path, relative: str) -> Path:
    """Create ``root/relative`` directory by directory, 0700, refusing anything on the way
    that is not a real directory; returns it."""
    path = root
    for part in relative.split("/"):
        path = path / part
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise BackupError(f"{relative!r:.120} is both a file and a directory") from None
    return path


def _write_member(
    tar: tarfile.TarFile, member: tarfile.TarInfo, target: Path, mode: int
) -> tuple[int, str]:
    """Copy one member's data to the new file ``target``; its size and sha256."""
    source = tar.extractfile(member)
    if source is None:  # pragma: no cover - regular members always have data
        raise BackupError(f"member {member.name!r:.120} has no data")
    digest = hashlib.sha256()
    size = 0
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            out.write(chunk)
    return size, digest.hexdigest()


def _budget(root: Path, limits: BackupLimits) -> tuple[int, str]:
    """How many bytes the unpacked backup may take (the cap, or what is free on the home's
    filesystem less a reserve, whichever is smaller), and why that many."""
    vfs = os.statvfs(root)
    free = max(0, vfs.f_bavail * vfs.f_frsize - limits.reserve_bytes)
    if free < limits.max_unpacked_bytes:
        return free, f"the {free} bytes free beside {root.parent} (less a reserve)"
    return limits.max_unpacked_bytes, f"the cap of {limits.max_unpacked_bytes} bytes"


def _unpack_members(
    path: Path, root: Path, limits: BackupLimits
) -> tuple[bytes, dict[str, tuple[int, str]]]:
    """Stream the archive into ``root``; returns ``backup.json``'s bytes and every other
    file's (size, sha256) by member name."""
    budget, why = _budget(root, limits)
    files: dict[str, tuple[int, str]] = {}
    index = b""
    total = count = 0
    with (
        open(path, "rb") as raw,
        gzip.GzipFile(fileobj=raw) as unzipped,
        tarfile.open(fileobj=unzipped, mode="r|", tarinfo=_BoundedTarInfo) as tar,
    ):
        for member in tar:
            count += 1
            if count > limits.max_members:
                raise BackupError(f"the backup has more than {limits.max_members} members")
            try:
                name = checked_member_name(member)
            except ArchiveError as exc:
                raise BackupError(str(exc)) from None
            if member.isdir() and name == "":
                continue
            kind = member_kind(name, is_dir=member.isdir())
            if not kind:
                if name == "toolbox.json":
                    raise BackupError(
                        "this is a toolbox archive (from 'shelldon tools export'), not a "
                        "backup: add its tools with 'shelldon tools import'"
                    )
                raise BackupError(f"member {name!r:.120} is not part of a shelldon backup")
            if member.isdir():
                _make_dirs(root, name)
                continue
            if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE):
                raise BackupError(f"member {name!r:.120} is a sparse or continued file")
            cap = member_cap(kind, limits)
            if member.size > cap:
                raise BackupError(
                    f"member {name!r:.120} is {member.size} bytes; the limit is {cap}"
                )
            total += member.size
            if total > budget:
                raise BackupError(f"the backup unpacks to more than {why}")
            if name in files or (kind == "index" and index):
                raise BackupError(f"member {name!r:.120} appears twice")
            if kind == "index":
                source = tar.extractfile(member)
                index = source.read(cap + 1) if source else b""
                continue
            parent, _, leaf = name.rpartition("/")
            directory = _make_dirs(root, parent) if parent else root
            mode = 0o700 if kind == "workspace" and member.mode & stat.S_IXUSR else 0o600
            try:
                files[name] = _write_member(tar, member, directory / leaf, mode)
            except FileExistsError:
                raise BackupError(f"member {name!r:.120} appears twice") from None
            if kind == "workspace":
                # A forged time (NaN, past the year 9999) only loses the file its mtime.
                with contextlib.suppress(OSError, OverflowError, ValueError):
                    os.utime(directory / leaf, (member.mtime, member.mtime))
    return index, files


def _read_index(index: bytes) -> dict[str, Any]:
    if not index:
        raise BackupError(f"the archive has no {INDEX_MEMBER}: it is not a shelldon backup")
    try:
        data = json.loads(index)
    except (ValueError, RecursionError) as exc:
        raise BackupError(f"{INDEX_MEMBER} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != BACKUP_FORMAT:
        raise BackupError(
            f"{INDEX_MEMBER} is not backup format {BACKUP_FORMAT}; "
            "restore it with the shelldon that made it"
        )
    listed, quarantined = data.get("files"), data.get("quarantined", {})
    if not isinstance(listed, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("size"), int) and isinstance(v.get("sha256"), str)
        for v in listed.values()
    ):
        raise BackupError(f"{INDEX_MEMBER} has no list of files with sizes and hashes")
    if not isinstance(quarantined, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in quarantined.items()
    ):
        raise BackupError(f"{INDEX_MEMBER} has a malformed list of quarantined tools")
    return data


def _check_files(listed: dict[str, Any], files: dict[str, tuple[int, str]]) -> None:
    """Every file exactly as ``backup.json`` lists it: nothing missing, nothing extra."""
    for name in sorted(set(listed) | set(files)):
        if name not in files:
            raise BackupError(f"{INDEX_MEMBER} lists {name!r:.120} but the archive lacks it")
        if name not in listed:
            raise BackupError(
                f"the archive holds {name!r:.120}, which {INDEX_MEMBER} does not list"
            )
        if files[name] != (listed[name]["size"], listed[name]["sha256"]):
            raise BackupError(
                f"{name!r:.120} does not match its size and hash in {INDEX_MEMBER}: the backup "
                "is damaged or was edited"
            )
    for required in (DATABASE_MEMBER, TOOLBOX_MEMBER):
        if required not in files:
            raise BackupError(f"the backup has no {required}")


def unpack_backup(path: Path, root: Path) -> Unpacked:
    """Unpack the backup at ``path`` into the empty directory ``root`` and check it whole (see
    the module docstring); ``BackupError`` says why it was refused."""
    limits = BackupLimits()
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise BackupError(f"cannot read {path}: {exc.strerror or exc}") from None
    if size > limits.max_archive_bytes:
        raise BackupError(f"{path} is {size} bytes; a backup is at most {limits.max_archive_bytes}")
    try:
        index, files = _unpack_members(path, root, limits)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise BackupError(f"{path} is not a readable shelldon backup (a tar.gz): {exc}") from None
    except OSError as exc:
        raise BackupError(f"cannot unpack {path}: {exc.strerror or exc}") from None
    data = _read_index(index)
    _check_files(data["files"], files)
    try:
        schema = check_foreign_database(root / DATABASE_MEMBER)
    except StoreError as exc:
        raise BackupError(f"the backup's database was refused: {exc}") from None
    try:
        tools = read_archive(root / TOOLBOX_MEMBER)
    except ArchiveError as exc:
        raise BackupError(f"the backup's {TOOLBOX_MEMBER} was refused: {exc}") from None
    names = {t.name for t in tools}
    quarantined = tuple(
        (name, reason[:2000])
        for name, reason in sorted(data["quarantined"].items())
        if name in names
    )
    created = data.get("created_at")
    version = data.get("shelldon")
    return Unpacked(
        root,
        float(created) if isinstance(created, int | float) and 0 <= created < 2**33 else 0.0,
        version[:40] if isinstance(version, str) else "?",
        schema,
        tools,
        quarantined,
        CONFIG_MEMBER in files,
        sum(1 for name in files if name.startswith(f"{WORKSPACE_DIR}/")),
    )
