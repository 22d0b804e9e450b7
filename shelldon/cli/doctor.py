"""``shelldon doctor``: the health report (``shelldon.doctor``) at the terminal."""

from __future__ import annotations

import argparse
import os
import sys

from shelldon.config import load_settings


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report config, home, secrets (never their values), Python; 0 only when all is well."""
    from shelldon.doctor import run_doctor
    from shelldon.logs import configure_logging

    settings = load_settings(args.config)
    # The report is for a person; the sample gate's events would only interleave with it.
    configure_logging(actor="doctor", stream=open(os.devnull, "w"))  # noqa: SIM115
    for_run = None if args.purpose is None else args.purpose == "run"
    return run_doctor(settings, sys.stdout, for_run=for_run)
