"""``shelldon run``, ``chat`` and ``demo``: the commands that start the service
(``shelldon.boot``)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from shelldon.boot import INTERRUPTED, boot_console, boot_telegram
from shelldon.config import load_settings
from shelldon.home import make_private_dir


def cmd_run(args: argparse.Namespace) -> int:
    """The service: actor system + Telegram transport."""
    return boot_telegram(load_settings(args.config))


def cmd_chat(args: argparse.Namespace) -> int:
    """The same runtime with the console transport; approvals asked at the prompt."""
    return boot_console(
        load_settings(args.config),
        banner=lambda log_path: f"(logs: {log_path})\n",
        closing=lambda status: "shelldon: interrupted (Ctrl-C)\n" if status == INTERRUPTED else "",
    )


def cmd_demo(args: argparse.Namespace) -> int:
    """Offline story on the scripted brain through the real runtime."""
    import tempfile

    from shelldon.demo import STORY, write_demo_config

    home = Path(args.home) if args.home else Path(tempfile.mkdtemp(prefix="shelldon-demo-"))
    config = write_demo_config(make_private_dir(home))
    settings = load_settings(config, environ={**os.environ, "SHELLDON_HOME": str(home)})

    def closing(status: int) -> str:
        if status == INTERRUPTED:
            return "shelldon: the demo was interrupted (Ctrl-C)\n"
        if status != 0:
            return ""
        tools = sorted(p.stem for p in settings.live_tools.glob("*.py"))
        return f"live self-coded tools: {', '.join(tools) or 'none'}\n"

    return boot_console(
        settings,
        banner=lambda log_path: f"shelldon demo — home {home}, logs {log_path}\n",
        closing=closing,
        story=STORY,
        auto_yes=args.yes,
        check=False,
    )
