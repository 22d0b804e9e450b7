"""The log of a short-lived command (tools, backup, restore): the home's log file, so the
terminal keeps the answers and the prompts."""

from __future__ import annotations

import os

from shelldon.config import Settings
from shelldon.home import make_private_dir


def log_to_home_file(settings: Settings, *, create: bool = True) -> None:
    """Send this command's events to the home's log file; without ``create``, a home that is
    not there yet gets no log."""
    from shelldon.logs import configure_logging

    if not create and not settings.home.is_dir():
        configure_logging(actor="cli", stream=open(os.devnull, "w"))  # noqa: SIM115
        return
    log_dir = make_private_dir(make_private_dir(settings.home) / "logs")
    fd = os.open(log_dir / "shelldon.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    # Left open: the loggers hold it until this short-lived process exits.
    log_file = open(fd, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    configure_logging(actor="cli", home=settings.home, stream=log_file)
