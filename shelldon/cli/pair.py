"""``shelldon pair CODE``: make the Telegram user the pet gave CODE its owner.

Run on the device, as root (the installed config is root's) or as whoever owns the config:
the code is looked up in the service's store (unexpired, unused; compared in constant time),
``[telegram] allowed_users`` is set in the config file with every other byte kept
(``shelldon.config_edit``), and only once that file is written is the code used up, in the same
store transaction, and the pairing audited. A running service picks the owner up on its next
poll, without a restart (``shelldon.transport.telegram_link``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TextIO

from shelldon.config import Settings, load_settings
from shelldon.config_edit import ConfigEditError, add_owner
from shelldon.rules import pairing as rules
from shelldon.store import PairingCode, Store

NO_CODE = (
    "no such pairing code, or it has expired or was used: send the bot a message in Telegram "
    "for a new one (it is good for 10 minutes)"
)


def pair(settings: Settings, typed: str, now: float, out: TextIO, err: TextIO) -> int:
    """Pair the user ``typed`` (a code) was issued to; 0 when paired, 1 when not, 2 when
    ``typed`` cannot be a code."""
    code = rules.normalized(typed)
    if not code:
        print(
            f"shelldon pair: {typed!r} is not a pairing code (8 letters and digits, as the "
            "bot sent it: ABCD-EFGH)",
            file=err,
        )
        return 2
    path = settings.config_file
    if not settings.database.exists():  # never create a database (as root) to find nothing
        print(f"shelldon pair: {NO_CODE} (no database at {settings.database})", file=err)
        return 1
    with Store(settings.database) as store:
        paired: PairingCode | None = None
        try:
            with store.pairing.redeeming(now) as live:
                paired = rules.matching(code, live, now)
                if paired is not None:
                    add_owner(path, paired.user_id)
                    store.pairing.redeem(paired, now)
        except ConfigEditError as exc:
            hint = "" if os.geteuid() == 0 else " (run it as root: sudo shelldon pair CODE)"
            print(f"shelldon pair: {exc}{hint}; the code is still good", file=err)
            return 1
        if paired is None:
            print(f"shelldon pair: {NO_CODE}", file=err)
            return 1
        name = rules.who(paired.name, paired.username, paired.user_id)
        detail = {"name": paired.name, "username": paired.username, "config": str(path)}
        store.audit.record("owner", "paired", str(paired.user_id), detail, now)
    print(f"added {name} to allowed_users in {path}", file=out)
    print(
        "A running service picks it up at its next poll (within a minute), no restart "
        f"needed, and tells {paired.name or 'them'} so in Telegram.",
        file=out,
    )
    return 0


def cmd_pair(args: argparse.Namespace) -> int:
    """Pair the first owner (see the module's docstring)."""
    from shelldon.logs import configure_logging

    settings = load_settings(args.config)
    # As root: no log file in the pet's home (it would be root's); the audit keeps the record.
    configure_logging(actor="pair", stream=open(os.devnull, "w"))  # noqa: SIM115
    return pair(settings, args.code, time.time(), sys.stdout, sys.stderr)
