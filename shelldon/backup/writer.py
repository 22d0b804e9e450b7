"""Writing a backup (``shelldon backup FILE``): the whole pet in one archive, safe while the
service runs.

The database is copied with sqlite's online backup API (one consistent snapshot; the service
keeps writing meanwhile), the toolbox is written as ``tools export`` writes it (quarantined
tools too, each only as the code the owner approved), the workspace as directories and regular
files (a link, a special file or a name a restore would refuse is left out and named), and the
config file in use. The vault is never read. The archive is written beside FILE and renamed
into place, 0600; FILE may not lie inside the home (the workspace would then hold the whole
database, within every worker's reach, and each backup would carry the last).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from shelldon import __version__
from shelldon.backup.layout import (
    BACKUP_FORMAT,
    CONFIG_MEMBER,
    DATABASE_MEMBER,
    INDEX_MEMBER,
    TOOLBOX_MEMBER,
    WORKSPACE_DIR,
    BackupError,
    BackupLimits,
)
from shelldon.config import Settings
from shelldon.proc.beneath import open_beneath
from shelldon.store import Store
from shelldon.toolbox.archive import ArchiveError, ExportReport, export_toolbox
from shelldon.toolbox.toolbox import Toolbox


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What a backup holds, and what it left out (with why)."""

    path: Path
    size: int
    schema_version: int
    tools: tuple[str, ...]
    quarantined: tuple[str, ...]
    tools_left_out: tuple[str, ...]
    workspace_files: int
    left_out: tuple[str, ...]
    config: bool


@dataclass(frozen=True, slots=True)
class _Workspace:
    dirs: tuple[str, ...]
    files: tuple[tuple[str, int], ...]
    left_out: tuple[str, ...]


def _name_problem(relative: str) -> str:
    """Why a restore would refuse this workspace name ("" when it would not)."""
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        return "its name is not UTF-8"
    if "\\" in relative:
        return "its name has a backslash"
    return ""


def _walk_workspace(workspace: Path) -> _Workspace:
    """The workspace's directories and regular files (relative names), and what is left out."""
    dirs: list[str] = []
    files: list[tuple[str, int]] = []
    left_out: list[str] = []

    def unreadable(exc: OSError) -> None:
        left_out.append(f"{exc.filename}: cannot be read ({exc.strerror})")

    for root, dirnames, filenames in os.walk(workspace, onerror=unreadable):
        base = Path(root).relative_to(workspace)
        kept: list[str] = []
        for name in sorted(dirnames) + sorted(filenames):
            relative = (base / name).as_posix()
            try:
                st = os.lstat(Path(root) / name)
            except OSError as exc:
                left_out.append(f"{relative}: {exc.strerror}")
                continue
            problem = _name_problem(relative)
            if stat.S_ISLNK(st.st_mode):
                left_out.append(f"{relative}: a symbolic link")
            elif problem:
                left_out.append(f"{relative!r}: {problem}")
            elif stat.S_ISDIR(st.st_mode):
                kept.append(name)
                dirs.append(relative)
            elif stat.S_ISREG(st.st_mode):
                files.append((relative, st.st_size))
            else:
                left_out.append(f"{relative}: not a regular file")
        dirnames[:] = kept
    return _Workspace(tuple(dirs), tuple(files), tuple(left_out))


class _Hashing:
    """Reads exactly ``size`` bytes of ``source`` and hashes them on the way into the tar."""

    def __init__(self, source: BinaryIO, size: int) -> None:
        self.source, self.left, self.digest = source, size, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.source.read(n)
        self.left -= len(data)
        self.digest.update(data)
        return data


class _Writer:
    """Adds members to the tar and keeps their size and hash for ``backup.json``."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.files: dict[str, dict[str, object]] = {}

    def add_dir(self, name: str) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o700, int(time.time())
        self.tar.addfile(info)

    def add_file(self, name: str, path: Path) -> bool:
        """Add the regular file ``path`` (never through a link); False if it is gone or is not
        a regular file."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        return self.add_fd(name, fd, path)

    def add_fd(self, name: str, fd: int, shown: Path | str) -> bool:
        """Add what the open descriptor ``fd`` reads (and close it); False if it is not a
        regular file."""
        with os.fdopen(fd, "rb") as source:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return False
            info = tarfile.TarInfo(name)
            info.size, info.mtime = st.st_size, int(st.st_mtime)
            info.mode = 0o700 if st.st_mode & stat.S_IXUSR else 0o600
            reader = _Hashing(source, st.st_size)
            try:
                self.tar.addfile(info, reader)
            except OSError:
                raise BackupError(
                    f"{shown} shrank while it was being backed up; run it again"
                ) from None
        self.files[name] = {"size": st.st_size, "sha256": reader.digest.hexdigest()}
        return True

    def add_bytes(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
        self.tar.addfile(info, io.BytesIO(data))


def _add_workspace(writer: _Writer, root: Path, workspace: _Workspace, left_out: list[str]) -> int:
    """Add the walked workspace under ``workspace/``; how many files went in (one that went
    away or became something else since the walk is left out and named)."""
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    carried = 0
    try:
        writer.add_dir(WORKSPACE_DIR)
        for name in workspace.dirs:
            writer.add_dir(f"{WORKSPACE_DIR}/{name}")
        for name, _size in workspace.files:
            try:
                # As root, never through a directory swapped for a link since the walk.
                fd = open_beneath(root_fd, name, os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                left_out.append(f"{name}: gone or changed while backing up")
                continue
            if writer.add_fd(f"{WORKSPACE_DIR}/{name}", fd, name):
                carried += 1
            else:
                left_out.append(f"{name}: gone or changed while backing up")
    finally:
        os.close(root_fd)
    return carried


def _check_target(settings: Settings, path: Path, overwrite: bool) -> None:
    """Refuse a home with no pet, and a FILE inside the home, a directory or (without
    ``overwrite``) one that exists."""
    if not settings.database.is_file():
        raise BackupError(f"there is no pet at {settings.home} (no {settings.database.name})")
    if path.resolve().is_relative_to(settings.home.resolve()):
        raise BackupError(
            f"{path} is inside the pet's home {settings.home}; write the backup somewhere else"
        )
    if path.is_dir():
        raise BackupError(f"{path} is a directory; give a file name like pet.tar.gz")
    if os.path.lexists(path) and not overwrite:
        raise BackupError(f"{path} already exists; choose another file or pass --force")


def _snapshot(settings: Settings, work: Path) -> tuple[int, ExportReport, dict[str, str]]:
    """The database (online backup) and the toolbox archive, written into ``work``: the
    schema version, what the toolbox export did, and why each quarantined tool is there."""
    with Store(settings.database) as store:
        store.backup_to(work / DATABASE_MEMBER)
        selfcode = Toolbox.from_settings(settings, store)
        try:
            tools = export_toolbox(selfcode, work / TOOLBOX_MEMBER, quarantined=True)
        except ArchiveError as exc:  # a tool changed while it was copied
            raise BackupError(str(exc)) from None
        quarantined = {
            name: selfcode.quarantine_reason(name)
            for name in selfcode.quarantined()
            if name in tools.exported
        }
        return store.schema_version, tools, quarantined


def write_backup(settings: Settings, path: Path, *, overwrite: bool = False) -> BackupReport:
    """Write the whole pet of ``settings``' home to the archive ``path`` (see the module
    docstring); ``BackupError`` says why not."""
    limits = BackupLimits()
    _check_target(settings, path, overwrite)
    if settings.workspace.is_symlink():
        raise BackupError(f"{settings.workspace} is a symbolic link; a workspace is a directory")
    has_workspace = settings.workspace.is_dir()
    workspace = _walk_workspace(settings.workspace) if has_workspace else _Workspace((), (), ())
    unpacked = sum(size for _name, size in workspace.files)
    entries = len(workspace.files) + len(workspace.dirs)
    if entries + 5 > limits.max_members:
        raise BackupError(
            f"the workspace holds {entries} files and directories; a backup carries at most "
            f"{limits.max_members - 5}: make room in it first"
        )
    if unpacked > limits.max_unpacked_bytes:
        raise BackupError(
            f"the workspace holds {unpacked} bytes; a backup carries at most "
            f"{limits.max_unpacked_bytes}: make room in it first"
        )
    config = settings.config_path
    if config is not None and config.is_file() and config.stat().st_size > limits.max_config_bytes:
        raise BackupError(f"{config} is over {limits.max_config_bytes} bytes")
    target_dir = path.parent
    try:
        scratch = tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=target_dir)
    except OSError as exc:
        raise BackupError(f"cannot write to {target_dir}: {exc.strerror or exc}") from None
    with scratch as tmp:
        work = Path(tmp)
        schema, tools, quarantined = _snapshot(settings, work)
        archive = work / "backup.tar.gz"
        left_out = list(workspace.left_out)
        with open(archive, "wb") as fh:
            with tarfile.open(fileobj=fh, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                writer = _Writer(tar)
                writer.add_file(DATABASE_MEMBER, work / DATABASE_MEMBER)
                writer.add_file(TOOLBOX_MEMBER, work / TOOLBOX_MEMBER)
                has_config = bool(config and writer.add_file(CONFIG_MEMBER, config))
                carried = 0
                if has_workspace:
                    carried = _add_workspace(writer, settings.workspace, workspace, left_out)
                index = {
                    "format": BACKUP_FORMAT,
                    "shelldon": __version__,
                    "created_at": time.time(),
                    "schema_version": schema,
                    "quarantined": quarantined,
                    "files": writer.files,
                }
                writer.add_bytes(INDEX_MEMBER, json.dumps(index, indent=1).encode())
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(archive, 0o600)
        size = archive.stat().st_size
        whole = sum(int(str(f["size"])) for f in writer.files.values())
        if size > limits.max_archive_bytes or whole > limits.max_unpacked_bytes:
            raise BackupError(
                f"the backup came to {size} bytes ({whole} unpacked), over what a restore "
                f"accepts ({limits.max_archive_bytes}, {limits.max_unpacked_bytes} unpacked): "
                "make room in the workspace first"
            )
        os.replace(archive, path)
    return BackupReport(
        path,
        size,
        schema,
        tuple(n for n in tools.exported if n not in quarantined),
        tuple(quarantined),
        (*tools.skipped_broken, *tools.skipped_tampered),
        carried,
        tuple(left_out),
        has_config,
    )
