"""The backup archive: what one ``shelldon backup`` file holds, and the caps a restore reads
it under.

Layout (stdlib ``tarfile``, gzip)::

    shelldon.db         the database, copied with sqlite's online backup (rollback journal)
    config.toml         the config file in use, when there is one (secrets are never in it)
    toolbox.tar.gz      live and quarantined tools with their tests: a ``tools export`` archive
    workspace/...       the workspace: directories and regular files only
    backup.json         last: {"format": 1, "shelldon", "created_at", "schema_version",
                         "quarantined": {name: reason}, "files": {member: {"size", "sha256"}}}

Never in it: the vault (secrets), the logs, a tool's staging directory. A restore accepts
exactly these names (``member_kind``), every file listed in ``backup.json`` with its size and
hash, and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

BACKUP_FORMAT = 1
INDEX_MEMBER = "backup.json"
DATABASE_MEMBER = "shelldon.db"
CONFIG_MEMBER = "config.toml"
TOOLBOX_MEMBER = "toolbox.tar.gz"
WORKSPACE_DIR = "workspace"


class BackupError(ValueError):
    """A backup cannot be written, or was refused at restore; the message says what and why."""


@dataclass(frozen=True, slots=True)
class BackupLimits:
    """Caps on a backup: what a Pi's SD card and memory can take while one is checked."""

    max_archive_bytes: int = 1024 * 1024 * 1024
    max_unpacked_bytes: int = 2 * 1024 * 1024 * 1024
    max_members: int = 50_000
    max_index_bytes: int = 16 * 1024 * 1024
    max_config_bytes: int = 1024 * 1024
    max_toolbox_bytes: int = 16 * 1024 * 1024
    # Left free on the home's filesystem after unpacking, so the pet can still write.
    reserve_bytes: int = 64 * 1024 * 1024


def member_kind(name: str, *, is_dir: bool) -> str:
    """Which part of the pet a (checked, normalised) member name is: "index", "database",
    "config", "toolbox", "workspace"; "" when a backup may not hold it."""
    if name.startswith(f"{WORKSPACE_DIR}/") or (is_dir and name == WORKSPACE_DIR):
        return "workspace"
    kinds = {
        INDEX_MEMBER: "index",
        DATABASE_MEMBER: "database",
        CONFIG_MEMBER: "config",
        TOOLBOX_MEMBER: "toolbox",
    }
    return "" if is_dir else kinds.get(name, "")


def member_cap(kind: str, limits: BackupLimits) -> int:
    """The largest a member of ``kind`` may be."""
    caps = {
        "index": limits.max_index_bytes,
        "config": limits.max_config_bytes,
        "toolbox": limits.max_toolbox_bytes,
    }
    return caps.get(kind, limits.max_unpacked_bytes)
