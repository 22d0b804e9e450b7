"""The pet's home on disk: private by default.

``shelldon run``, ``chat`` and ``demo`` create what is missing of it 0700 whatever the umask,
and the database 0600 (``shelldon.store.Store``): conversations, facts and keys are the owner's
alone. A directory that exists keeps its mode; ``shelldon doctor`` warns about a secret file
others can read.
"""

from __future__ import annotations

import os
from pathlib import Path

from shelldon.config import Settings

PRIVATE_DIR = 0o700


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents of it inside nothing we own) as 0700; an existing
    directory is left as it is."""
    if not path.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:
            return path
        os.chmod(path, PRIVATE_DIR)  # mkdir's mode is filtered by the umask
    return path


def prepare_home(settings: Settings) -> None:
    """Create the home, vault, workspace, toolbox and log directory that are missing, all
    private."""
    make_private_dir(settings.home)
    for path in (settings.vault, settings.workspace, settings.toolbox, settings.home / "logs"):
        make_private_dir(path)
