"""The ``shelldon`` command: run, chat, demo, tools, doctor, --version."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from shelldon import __version__
from shelldon.config import ConfigError, Settings, load_settings


def _load(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report config, home, secrets (never their values), Python; 0 only when all is well."""
    from shelldon.doctor import run_doctor

    settings = _load(args)
    return run_doctor(settings, sys.stdout)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (kept separate so tests can inspect it)."""
    parser = argparse.ArgumentParser(
        prog="shelldon", description="A self-coding pet agent for one owner."
    )
    parser.add_argument("--version", action="version", version=f"shelldon {__version__}")
    parser.add_argument(
        "--config", help="config file (default: $SHELLDON_CONFIG or <home>/config.toml)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = sub.add_parser("doctor", help="check config, secrets, sandbox, limits")
    doctor.set_defaults(func=cmd_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"shelldon: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
