"""``shelldon backup`` and ``shelldon restore`` at the terminal (``shelldon.backup``)."""

from __future__ import annotations

import argparse
import sys

from shelldon.boot import INTERRUPTED
from shelldon.cli.logfile import log_to_home_file
from shelldon.config import load_settings


def cmd_backup(args: argparse.Namespace) -> int:
    """Write the whole pet to one archive (see ``shelldon.backup``)."""
    from shelldon.backup import run_backup

    settings = load_settings(args.config)
    log_to_home_file(settings, create=False)
    try:
        return run_backup(settings, args.file, args.force, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        print("shelldon backup: interrupted (Ctrl-C); no backup was written", file=sys.stderr)
        return INTERRUPTED


def cmd_restore(args: argparse.Namespace) -> int:
    """Check a backup whole and restore it into the home (see ``shelldon.backup``)."""
    from shelldon.backup import run_restore

    settings = load_settings(args.config)
    # Nothing is written into a home that is not there before the backup is checked.
    log_to_home_file(settings, create=False)
    try:
        return run_restore(
            settings,
            args.file,
            force=args.force,
            yes=args.yes,
            inp=sys.stdin,
            out=sys.stdout,
            err=sys.stderr,
        )
    except KeyboardInterrupt:
        print("\nshelldon restore: interrupted (Ctrl-C); nothing was restored", file=sys.stderr)
        return INTERRUPTED
