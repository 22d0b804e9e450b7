"""The whole pet in one file: ``shelldon backup`` writes it, ``shelldon restore`` checks it whole
and puts it into a home, gating every tool again.

``layout`` says what a backup holds, ``writer`` writes one (safe while the service runs),
``reader`` unpacks and checks one as hostile input, ``restore`` puts it into place all or
nothing, ``commands`` is the terminal front.
"""

from shelldon.backup.commands import run_backup, run_restore

__all__ = ["run_backup", "run_restore"]
