"""The service's start-up order, for ``shelldon run``, ``chat`` and ``demo``: the home and
logging, the toolbox, the worker zygote before any secret is read, then the secrets, the
preflight check, and the actor system (which says READY)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shelldon.config import Settings
from shelldon.home import prepare_home

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


def _logs_to_file(settings: Settings) -> Path:
    path = settings.home / "logs" / "shelldon.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.close(fd)
    return path


def _start(settings: Settings, actor: str) -> tuple[Settings, Any]:
    """Logging, the worker zygote, then secrets; returns the settings in force (the memory
    fallback applied) and the zygote.

    Nothing of the actor runtime is imported yet: the zygote, which forks every worker, is the
    service's first fork. It never holds a credential (the environment's secrets arrive through
    a pipe only read after it left, see ``reexec_without_env_secrets``) and shares most of its
    pages with this process.
    """
    import gc

    from shelldon.logs import configure_logging

    prepare_home(settings)
    configure_logging(actor=actor, home=settings.home)
    from shelldon.proc.sandbox import forbid_dumps, with_memory_fallback
    from shelldon.toolbox.legacy import prepare_toolbox

    # Without a cgroup to cap a turn's memory, RLIMIT_AS is sized to this device instead.
    settings = with_memory_fallback(settings)

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
    return settings, zygote


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


def boot_telegram(settings: Settings) -> int:
    """Start the service with the Telegram transport and run it; its exit status."""
    settings, zygote = _start(settings, "main")
    # Under systemd stderr is the journal too: the JSON log line alone says it there.
    refused = _refused(settings, "telegram", zygote, tell=sys.stderr.isatty())
    if refused is not None:
        return refused
    from actors.service import run_service

    return run_service(settings, transport="telegram", zygote=zygote)


def boot_console(
    settings: Settings,
    *,
    banner: Callable[[Path], str],
    closing: Callable[[int], str],
    story: tuple[tuple[str, bool], ...] = (),
    auto_yes: bool = False,
    check: bool = True,
) -> int:
    """Start the service with this terminal as the transport and run it; its exit status.

    ``banner(log_path)`` is written first, ``closing(status)`` last; ``check`` runs the
    preflight check first, as ``shelldon run`` does."""
    prepare_home(settings)
    # The terminal is kept for the conversation (in, out, and Console's done pipe); every
    # process's stdout becomes the log file.
    fds = (os.dup(0), os.dup(1), *os.pipe())
    log_path = _logs_to_file(settings)
    settings, zygote = _start(settings, "main")
    if check:
        refused = _refused(settings, "console", zygote, tell=True)
        if refused is not None:
            return refused
    from actors.service import Console, run_service

    console = Console(*fds)
    os.write(console.out_fd, banner(log_path).encode())
    status = run_service(
        settings,
        transport="console",
        console=console,
        story=story,
        auto_yes=auto_yes,
        zygote=zygote,
    )
    os.write(console.out_fd, closing(status).encode())
    return status
