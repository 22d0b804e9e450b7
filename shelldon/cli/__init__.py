"""The ``shelldon`` command: run, chat, demo, tools, backup, restore, doctor, --version."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shelldon import __version__
from shelldon.config import ConfigError, Settings, default_home, load_settings
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
    """Logging, the worker zygote, then secrets; returns the zygote.

    Nothing of the actor runtime is imported yet: the zygote, which forks every worker, is the
    service's first fork. It never holds a credential (the environment's secrets arrive through
    a pipe only read after it left, see ``reexec_without_env_secrets``) and shares most of its
    pages with this process.
    """
    import gc

    from shelldon.logs import configure_logging

    prepare_home(settings)
    configure_logging(actor=actor, home=settings.home)
    from shelldon.proc.sandbox import forbid_dumps
    from shelldon.toolbox.legacy import prepare_toolbox

    # The toolbox and its manifest, from the store, before any worker can read them.
    prepare_toolbox(settings)
    # No process of this user may read this one's memory (the secrets arrive below) or drive
    # the zygote; the zygote and every worker inherit it.
    forbid_dumps()
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
        tools = sorted(p.stem for p in settings.live_tools.glob("*.py"))
        os.write(console.out_fd, f"live self-coded tools: {', '.join(tools) or 'none'}\n".encode())
    return status


def cmd_tools(args: argparse.Namespace) -> int:
    """List, show, restore, remove, export or import self-coded tools (``shelldon.toolbox``)."""
    from shelldon.cli.tools import ToolsRequest, run_tools

    settings = _load(args)
    # Keep the terminal for the answers and the [y/N] prompts; events go to the log file.
    _log_to_home_file(settings)
    request = ToolsRequest(
        action=args.tools_command or "list",
        name=getattr(args, "name", ""),
        file=getattr(args, "file", ""),
        yes=getattr(args, "yes", False),
        replace=getattr(args, "replace", False),
        force=getattr(args, "force", False),
    )
    return run_tools(settings, request, sys.stdin, sys.stdout, sys.stderr)


def _log_to_home_file(settings: Settings, *, create: bool = True) -> None:
    """Send this short-lived command's events to the home's log file, keeping the terminal for
    answers and prompts; without ``create``, a home that is not there yet gets no log."""
    from shelldon.logs import configure_logging

    if not create and not settings.home.is_dir():
        configure_logging(actor="cli", stream=open(os.devnull, "w"))  # noqa: SIM115
        return
    log_dir = make_private_dir(make_private_dir(settings.home) / "logs")
    fd = os.open(log_dir / "shelldon.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    # Left open: the loggers hold it until this short-lived process exits.
    log_file = open(fd, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    configure_logging(actor="cli", home=settings.home, stream=log_file)


def cmd_backup(args: argparse.Namespace) -> int:
    """Write the whole pet to one archive (see ``shelldon.backup``)."""
    from shelldon.backup import run_backup

    settings = _load(args)
    _log_to_home_file(settings, create=False)
    try:
        return run_backup(settings, args.file, args.force, sys.stdout, sys.stderr)
    except KeyboardInterrupt:
        print("shelldon backup: interrupted (Ctrl-C); no backup was written", file=sys.stderr)
        return INTERRUPTED


def cmd_restore(args: argparse.Namespace) -> int:
    """Check a backup whole and restore it into the home (see ``shelldon.backup``)."""
    from shelldon.backup import run_restore

    settings = _load(args)
    # Nothing is written into a home that is not there before the backup is checked.
    _log_to_home_file(settings, create=False)
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


EXIT_STATUSES = (
    (0, "ok"),
    (1, "runtime failure"),
    (2, "usage or config error"),
    (78, "configuration that cannot work (no bot token, no API key)"),
    (INTERRUPTED, "interrupted (Ctrl-C)"),
)
"""Every exit status of every command (README "Exit statuses")."""

CONFIG_HELP = "config file (default: $SHELLDON_CONFIG, else <home>/config.toml)"


def _where(environ: Mapping[str, str]) -> str:
    """The home and config a command would use now, for its --help."""
    home = default_home(environ)
    raw = environ.get("SHELLDON_CONFIG")
    config = Path(raw).expanduser() if raw else home / "config.toml"
    found = "" if config.exists() else " (not there: defaults in use)"
    return (
        f"home:   {home}  ($SHELLDON_HOME, else ~/.shelldon)\n"
        f"config: {config}{found}\n"
        "        (--config FILE, else $SHELLDON_CONFIG, else <home>/config.toml)"
    )


def _epilog(environ: Mapping[str, str], statuses: Sequence[int], where: bool = True) -> str:
    meaning = dict(EXIT_STATUSES)
    lines = [_where(environ), ""] if where else []
    lines.append("exit status:")
    lines += [f"  {n:<4} {meaning[n]}" for n in statuses]
    return "\n".join(lines)


def _command(
    sub: Any,
    name: str,
    summary: str,
    description: str,
    statuses: Sequence[int],
    environ: Mapping[str, str],
    *,
    where: bool = True,
) -> argparse.ArgumentParser:
    """A subcommand whose --help says what it does, what it reads and how it exits; it takes
    --config after its name too (``shelldon run --config FILE``)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        help=summary,
        description=textwrap.fill(description, 79),
        epilog=_epilog(environ, statuses, where),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # SUPPRESS: given before the command, the value is not reset here when absent after it.
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=CONFIG_HELP)
    return parser


def _add_tools_parser(sub: Any, environ: Mapping[str, str]) -> None:
    tools = _command(
        sub,
        "tools",
        "list, show, restore, remove, export or import self-coded tools",
        "Self-coded tools at the terminal, without the service: list them (the default), show "
        "one, restore one from quarantine, remove one, export the live ones, import an archive "
        "(each tool "
        "gated again and asked for).",
        (0, 1, 2),
        environ,
    )
    actions = tools.add_subparsers(dest="tools_command", metavar="ACTION")
    epilog = _epilog(environ, (0, 1, 2))

    def action(name: str, summary: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(
            name,
            help=summary,
            description=summary[:1].upper() + summary[1:] + ".",
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help=CONFIG_HELP)
        return parser

    action("list", "live, staged and quarantined tools with strikes (the default)")
    show = action("show", "a tool's description, schema, hash, strikes and code")
    show.add_argument("name", metavar="NAME")
    restore = action("restore", "bring a quarantined tool back, strikes reset (audited)")
    restore.add_argument("name", metavar="NAME")
    remove = action("remove", "take a tool out for good, its test archived with it (audited)")
    remove.add_argument("name", metavar="NAME")
    export = action("export", "write the live tools and their tests to FILE (tar.gz)")
    export.add_argument("file", metavar="FILE", help="the archive to write (tar.gz)")
    export.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    imp = action("import", "gate each tool in FILE and ask before adding it")
    imp.add_argument("file", metavar="FILE", help="an archive made by 'shelldon tools export'")
    imp.add_argument("--yes", action="store_true", help="add every tool whose gate passes")
    imp.add_argument("--replace", action="store_true", help="replace live tools of the same name")
    tools.set_defaults(func=cmd_tools)


def _add_backup_parsers(sub: Any, environ: Mapping[str, str]) -> None:
    backup = _command(
        sub,
        "backup",
        "write the whole pet to one archive",
        "Write the whole pet to FILE (tar.gz, 0600): the database through sqlite's online "
        "backup (safe while the service runs), the live and quarantined tools with their "
        "tests, the workspace and the config. Never the vault: secrets are not in a backup. "
        "FILE may not be inside the home.",
        (0, 1, 2, INTERRUPTED),
        environ,
    )
    backup.add_argument("file", metavar="FILE", help="the archive to write (tar.gz)")
    backup.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    backup.set_defaults(func=cmd_backup)
    restore = _command(
        sub,
        "restore",
        "check a backup whole and restore it into the home",
        "Check the backup in FILE whole (names, sizes, hashes, the database's schema) before "
        "writing anything, then restore it into the home: the database (migrated), the "
        "workspace, each tool gated again by real pytest and asked for as 'tools import' "
        "does, the config only if the home has none and you say yes. Refused while the "
        "service (or anything else) has the database open, and over a home that holds a pet "
        "unless --force, which moves that pet aside to <home>/replaced-<time>/.",
        (0, 1, 2, INTERRUPTED),
        environ,
    )
    restore.add_argument("file", metavar="FILE", help="a backup made by 'shelldon backup'")
    restore.add_argument(
        "--force", action="store_true", help="restore over a pet, moving it aside first"
    )
    restore.add_argument(
        "--yes", action="store_true", help="add every tool whose gate passes; use the config"
    )
    restore.set_defaults(func=cmd_restore)


def build_parser(environ: Mapping[str, str] | None = None) -> argparse.ArgumentParser:
    """The argument parser (kept separate so tests can inspect it); each command's --help
    names the home and config it would use under ``environ``."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog="shelldon",
        description="A self-coding pet agent for one owner. --config FILE may be given before "
        "or after the command.",
        epilog=_epilog(env, [n for n, _ in EXIT_STATUSES]),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"shelldon {__version__}")
    parser.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    doctor = _command(
        sub,
        "doctor",
        "check config, secrets, the gate, sandbox, limits, the unit",
        "Check everything the pet needs, one line each, without showing any secret: config, "
        "home, secrets found, the bot token's shape, allowed users, the sandbox layers, "
        "RLIMITs, the gate (a built-in sample tool gated end to end), memory, the unit.",
        (0, 1, 2),
        env,
    )
    doctor.add_argument(
        "--for",
        dest="purpose",
        choices=("run", "chat"),
        help="check for `shelldon run` (token, allowed_users required; the default once a "
        "config file exists) or for `chat`",
    )
    doctor.set_defaults(func=cmd_doctor)
    _command(
        sub,
        "run",
        "run the service (Telegram)",
        "The service: every actor in this process, workers forked by a zygote, the Telegram "
        "transport. Refuses at once (78) without a usable bot token or API key; stops "
        "cleanly within 5 s on SIGTERM (0) or Ctrl-C (130). Logs JSON lines on stdout.",
        (0, 1, 2, 78, INTERRUPTED),
        env,
    ).set_defaults(func=cmd_run)
    _command(
        sub,
        "chat",
        "chat in this terminal",
        "The same runtime with this terminal as the transport: type a message, answer "
        "approvals at [y/N]; Ctrl-D ends the session. History goes to the same store; logs go "
        "to <home>/logs/shelldon.jsonl.",
        (0, 1, 2, 78, INTERRUPTED),
        env,
    ).set_defaults(func=cmd_chat)
    demo = _command(
        sub,
        "demo",
        "an offline self-coding story on the scripted brain",
        "An offline story through the real runtime: a FREE tool, a RISKY call you approve, a "
        "tool the brain writes, gated by real pytest and promoted, then used. It runs in a "
        "home of its own (a fresh temporary one unless --home), with a config of its own: "
        "--config is refused. Ends at the first no, gate failure or overdue step (1).",
        (0, 1, 2, INTERRUPTED),
        env,
        where=False,
    )
    demo.add_argument("--yes", action="store_true", help="answer every approval with yes")
    demo.add_argument("--home", help="home for the demo (default: a fresh temporary one)")
    demo.set_defaults(func=cmd_demo)
    _add_tools_parser(sub, env)
    _add_backup_parsers(sub, env)
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
    if args.command == "demo" and args.config is not None:
        parser.error("demo: --config is not used: the demo writes a config of its own")
    from shelldon.store import StoreError

    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"shelldon: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:  # the database cannot be used (the toolbox is read from it first)
        print(f"shelldon: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
