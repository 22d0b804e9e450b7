"""The whole pet in one file: ``shelldon backup`` writes it, ``shelldon restore`` checks it whole
and puts it into a home, gating every tool again.

``layout`` says what a backup holds, ``writer`` writes one (safe while the service runs),
``reader`` unpacks and checks one as hostile input, ``restore`` puts it into place all or
nothing, ``commands`` is the terminal front.
"""

from shelldon.backup.commands import run_backup, run_restore
from shelldon.backup.layout import BackupError, BackupLimits
from shelldon.backup.reader import Unpacked, unpack_backup
from shelldon.backup.restore import (
    RestoreReport,
    config_destination,
    database_users,
    pet_in_home,
    restore_backup,
)
from shelldon.backup.writer import BackupReport, write_backup

__all__ = [
    "BackupError",
    "BackupLimits",
    "BackupReport",
    "RestoreReport",
    "Unpacked",
    "config_destination",
    "database_users",
    "pet_in_home",
    "restore_backup",
    "run_backup",
    "run_restore",
    "unpack_backup",
    "write_backup",
]
