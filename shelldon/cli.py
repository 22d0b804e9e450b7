"""The ``shelldon`` command: run, chat, demo, tools, doctor, --version."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shelldon import __version__
from shelldon.config import IN_PROCESS_BASE, ConfigError, Settings, load_settings
from shelldon.home import make_private_dir, prepare_home

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


def _load(args: argparse.Namespace) -> Settings:
    return load_settings(args.config)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report config, home, secrets (never their values), Python; 0 only when all is well."""
    from shelldon.doctor import run_doctor
    from shelldon.logs import configure_logging

    settings = _load(args)
    # The report is for a person; the sample gate's events would only interleave with it.
    configure_logging(actor="doctor", stream=open(os.devnull, "w"))  # noqa: SIM115
    for_run = None if args.purpose is None else args.purpose == "run"
    return run_doctor(settings, sys.stdout, for_run=for_run)


def _console_fds() -> tuple[int, int, int, int]:
    """Keep the terminal for the conversation; every process's stdout becomes the log file.
    Returns (in, out, done_r, done_w) for ``actors.service.Console``."""
    in_fd, out_fd = os.dup(0), os.dup(1)
    done_r, done_w = os.pipe()
    return in_fd, out_fd, done_r, done_w


def _logs_to_file(settings: Settings) -> Path:
    path = settings.home / "logs" / "shelldon.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.close(fd)
    return path


def _start(settings: Settings, actor: str) -> Any:
    """Logging, the worker zygote (in-process base), then secrets; returns the zygote or None.

    Nothing of the actor runtime is imported yet: the zygote, which forks every worker, is the
    service's first fork. It never holds a credential (the environment's secrets arrive through
    a pipe only read after it left, see ``reexec_without_env_secrets``) and shares most of its
    pages with this process.
    """
    import gc

    from shelldon.logs import configure_logging

    prepare_home(settings)
    configure_logging(actor=actor, home=settings.home)
    zygote = None
    if settings.actors.base == IN_PROCESS_BASE:
        from shelldon.worker.zygote import Zygote

        gc.collect()
        gc.freeze()
        zygote = Zygote.start(settings)
    from shelldon.secrets import take_env_secrets

    # Before anything else forks: no actor, worker or child may inherit a secret variable.
    take_env_secrets()
    return zygote


def _refused(settings: Settings, transport: str, zygote: Any, *, tell: bool) -> int | None:
    """Check the configuration before any actor starts; the exit status if it cannot work.

    One log line says why (and one line on stderr when ``tell``); warnings are logged."""
    import structlog

    from shelldon.preflight import EXIT_CONFIG, preflight

    log = structlog.get_logger("shelldon.start")
    found = preflight(settings, transport)
    for warning in found.warnings:
        log.warning("start_warning", warning=warning)
        if tell:
            print(f"shelldon: warning: {warning}", file=sys.stderr)
    if not found.refusals:
        return None
    reason = "; ".join(found.refusals)
    log.error("start_refused", reason=reason, exit_status=EXIT_CONFIG)
    if tell:
        print(f"shelldon: {reason}", file=sys.stderr)
    if zygote is not None:
        zygote.stop()
    return EXIT_CONFIG


def cmd_run(args: argparse.Namespace) -> int:
    """The service: actor system + Telegram transport."""
    settings = _load(args)
    zygote = _start(settings, "main")
    # Under systemd stderr is the journal too: the JSON log line alone says it there.
    refused = _refused(settings, "telegram", zygote, tell=sys.stderr.isatty())
    if refused is not None:
        return refused
    from actors.service import run_service

    return run_service(settings, transport="telegram", zygote=zygote)


def cmd_chat(args: argparse.Namespace) -> int:
    """The same runtime with the console transport; approvals asked at the prompt."""
    settings = _load(args)
    prepare_home(settings)
    fds = _console_fds()
    log_path = _logs_to_file(settings)
    zygote = _start(settings, "main")
    refused = _refused(settings, "console", zygote, tell=True)
    if refused is not None:
        return refused
    from actors.service import Console, run_service

    console = Console(*fds)
    os.write(console.out_fd, f"(logs: {log_path})\n".encode())
    status = run_service(settings, transport="console", console=console, zygote=zygote)
    if status == INTERRUPTED:
        os.write(console.out_fd, b"shelldon: interrupted (Ctrl-C)\n")
    return status


def cmd_demo(args: argparse.Namespace) -> int:
    """Offline story on the scripted brain through the real runtime."""
    import tempfile

    from shelldon.demo import STORY, write_demo_config

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="shelldon-demo-"))
    config = write_demo_config(make_private_dir(home))
    settings = load_settings(config, environ={**os.environ, "SHELLDON_HOME": str(home)})
    prepare_home(settings)
    fds = _console_fds()
    log_path = _logs_to_file(settings)
    zygote = _start(settings, "main")
    from actors.service import Console, run_service

    console = Console(*fds)
    os.write(console.out_fd, f"shelldon demo — home {home}, logs {log_path}\n".encode())
    status = run_service(
        settings,
        transport="console",
        console=console,
        story=STORY,
        auto_yes=args.yes,
        zygote=zygote,
    )
    if status == INTERRUPTED:
        os.write(console.out_fd, b"shelldon: the demo was interrupted (Ctrl-C)\n")
    elif status == 0:
        tools = sorted(p.stem for p in (settings.workspace / "tools").glob("*.py"))
        os.write(console.out_fd, f"live self-coded tools: {', '.join(tools) or 'none'}\n".encode())
    return status


def cmd_tools(args: argparse.Namespace) -> int:
    """List, show, restore, export or import self-coded tools (see ``shelldon.toolbox``)."""
    from shelldon.logs import configure_logging
    from shelldon.toolbox import ToolsRequest, run_tools

    settings = _load(args)
    # Keep the terminal for the answers and the [y/N] prompts; events go to the log file.
    log_dir = settings.home / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(log_dir / "shelldon.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    # Left open: the loggers hold it until this short-lived process exits.
    log_file = open(fd, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    configure_logging(actor="cli", home=settings.home, stream=log_file)
    request = ToolsRequest(
        action=args.tools_command or "list",
        name=getattr(args, "name", ""),
        file=getattr(args, "file", ""),
        yes=getattr(args, "yes", False),
        replace=getattr(args, "replace", False),
        force=getattr(args, "force", False),
    )
    return run_tools(settings, request, sys.stdin, sys.stdout, sys.stderr)


def _add_tools_parser(sub: Any) -> None:
    tools = sub.add_parser("tools", help="list, show, restore, export or import self-coded tools")
    actions = tools.add_subparsers(dest="tools_command", metavar="ACTION")
    actions.add_parser("list", help="live, staged and quarantined tools with strikes (default)")
    show = actions.add_parser("show", help="a tool's description, schema, hash, strikes, code")
    show.add_argument("name", metavar="NAME")
    restore = actions.add_parser("restore", help="bring a quarantined tool back, strikes reset")
    restore.add_argument("name", metavar="NAME")
    export = actions.add_parser("export", help="write the live tools and their tests to FILE")
    export.add_argument("file", metavar="FILE", help="the archive to write (tar.gz)")
    export.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    imp = actions.add_parser("import", help="gate each tool in FILE and ask before adding it")
    imp.add_argument("file", metavar="FILE", help="an archive made by 'shelldon tools export'")
    imp.add_argument("--yes", action="store_true", help="add every tool whose gate passes")
    imp.add_argument("--replace", action="store_true", help="replace live tools of the same name")
    tools.set_defaults(func=cmd_tools)


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
    doctor.add_argument(
        "--for",
        dest="purpose",
        choices=("run", "chat"),
        help="check for `shelldon run` (token, allowed_users required; the default once a "
        "config file exists) or for `chat`",
    )
    doctor.set_defaults(func=cmd_doctor)
    sub.add_parser("run", help="run the service (Telegram)").set_defaults(func=cmd_run)
    sub.add_parser("chat", help="chat in this terminal").set_defaults(func=cmd_chat)
    demo = sub.add_parser("demo", help="an offline self-coding story on the scripted brain")
    demo.add_argument("--yes", action="store_true", help="answer every approval with yes")
    demo.add_argument("--home", help="home for the demo (default: a fresh temporary one)")
    demo.set_defaults(func=cmd_demo)
    _add_tools_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in ("run", "chat", "demo"):
        from shelldon.secrets import reexec_without_env_secrets

        reexec_without_env_secrets(list(sys.argv[1:] if argv is None else argv))
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
