"""The ``shelldon`` command: its arguments, parsed and dispatched to the module of each
command (run, chat, demo, tools, backup, restore, doctor, pair) or answered here (--version)."""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from shelldon import __version__
from shelldon.boot import INTERRUPTED
from shelldon.cli.backup import cmd_backup, cmd_restore
from shelldon.cli.doctor import cmd_doctor
from shelldon.cli.pair import cmd_pair
from shelldon.cli.service import cmd_chat, cmd_demo, cmd_run
from shelldon.config import ConfigError, default_home

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


def _cmd_tools(args: argparse.Namespace) -> int:
    # Imported when asked for: the toolbox's archive, importer and diff are no part of `run`'s
    # path to READY (about 25 ms of imports on the dev box, several times that on a Pi).
    from shelldon.cli.tools import cmd_tools

    return cmd_tools(args)


def _add_tools_parser(sub: Any, environ: Mapping[str, str]) -> None:
    tools = _command(
        sub,
        "tools",
        "list, show, restore, remove, export or import self-coded tools",
        "Self-coded tools at the terminal, without the service: list them (the default), show "
        "one, restore one from quarantine, remove one, export the live ones, import an archive "
        "(each tool gated again and asked for).",
        (0, 1, 2),
        environ,
    )
    actions = tools.add_subparsers(dest="tools_command", metavar="ACTION")

    def action(name: str, summary: str) -> argparse.ArgumentParser:
        description = summary[:1].upper() + summary[1:] + "."
        return _command(actions, name, summary, description, (0, 1, 2), environ)

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
    tools.set_defaults(func=_cmd_tools)


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
    pair = _command(
        sub,
        "pair",
        "make the Telegram user the bot gave CODE the owner",
        "While allowed_users is empty, the bot answers a private message with a one-time code "
        "(good for 10 minutes). Run this on the device, as root for the installed config, with "
        "that code: the sender becomes the owner ([telegram] allowed_users in the config file, "
        "every other byte kept), the pairing is audited, and a running service picks it up "
        "without a restart.",
        (0, 1, 2),
        env,
    )
    pair.add_argument("code", metavar="CODE", help="the code the bot sent, as ABCD-EFGH")
    pair.set_defaults(func=cmd_pair)
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
