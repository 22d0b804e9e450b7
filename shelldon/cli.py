"""The ``shelldon`` command: run, chat, demo, tools, doctor, --version."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shelldon import __version__
from shelldon.config import ConfigError, Settings, load_settings


def _load(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report config, home, secrets (never their values), Python; 0 only when all is well."""
    from shelldon.doctor import run_doctor

    settings = _load(args)
    return run_doctor(settings, sys.stdout)


def _console_fds() -> Any:
    """Keep the terminal for the conversation; every process's stdout becomes the log file."""
    from actors.service import Console

    in_fd, out_fd = os.dup(0), os.dup(1)
    done_r, done_w = os.pipe()
    return Console(in_fd, out_fd, done_r, done_w)


def _logs_to_file(settings: Settings) -> Path:
    log_dir = settings.home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / "shelldon.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.close(fd)
    return path


def _start(settings: Settings, actor: str) -> None:
    from shelldon.logs import configure_logging
    from shelldon.secrets import take_env_secrets

    # Before anything forks: no actor, worker or child may inherit a secret variable.
    take_env_secrets()
    configure_logging(actor=actor, home=settings.home)


def cmd_run(args: argparse.Namespace) -> int:
    """The service: actor system + Telegram transport."""
    from actors.service import run_service

    settings = _load(args)
    _start(settings, "main")
    return run_service(settings, transport="telegram")


def cmd_chat(args: argparse.Namespace) -> int:
    """The same runtime with the console transport; approvals asked at the prompt."""
    from actors.service import run_service

    settings = _load(args)
    console = _console_fds()
    log_path = _logs_to_file(settings)
    _start(settings, "main")
    os.write(console.out_fd, f"(logs: {log_path})\n".encode())
    return run_service(settings, transport="console", console=console)


def cmd_demo(args: argparse.Namespace) -> int:
    """Offline story on the scripted brain through the real runtime."""
    import tempfile

    from actors.service import run_service
    from shelldon.demo import STORY, write_demo_config

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="shelldon-demo-"))
    config = write_demo_config(home)
    settings = load_settings(config, environ={**os.environ, "SHELLDON_HOME": str(home)})
    console = _console_fds()
    log_path = _logs_to_file(settings)
    _start(settings, "main")
    os.write(console.out_fd, f"shelldon demo — home {home}, logs {log_path}\n".encode())
    status = run_service(
        settings, transport="console", console=console, story=STORY, auto_yes=args.yes
    )
    tools = sorted(p.stem for p in (settings.workspace / "tools").glob("*.py"))
    os.write(console.out_fd, f"live self-coded tools: {', '.join(tools) or 'none'}\n".encode())
    return status


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
    sub.add_parser("run", help="run the service (Telegram)").set_defaults(func=cmd_run)
    sub.add_parser("chat", help="chat in this terminal").set_defaults(func=cmd_chat)
    demo = sub.add_parser("demo", help="an offline self-coding story on the scripted brain")
    demo.add_argument("--yes", action="store_true", help="answer every approval with yes")
    demo.add_argument("--home", help="home for the demo (default: a fresh temporary one)")
    demo.set_defaults(func=cmd_demo)
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
