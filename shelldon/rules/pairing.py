"""Pairing the first owner: while ``allowed_users`` is empty, a private message earns its sender
a one-time code, and ``sudo shelldon pair CODE`` on the device makes that sender the owner.

The code is only ever checked by the root command, never in Telegram: a message holding a code
(or a guess) pairs nobody, so guessing from Telegram gains nothing. The store keeps only the
code's digest. What a stranger may cost is capped: one code per person per ``CODE_TTL_S``, a
reminder (without the code) at most every ``REMIND_EVERY_S``, and ``MAX_CODES_PER_HOUR`` codes
across everyone, so a flood of strangers can neither fill the table nor spam sendMessage.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from shelldon.store.rows import PairingCode

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
"""No 0/O, 1/I: a code read off a phone and typed at a terminal survives the trip."""
CODE_LENGTH = 8  # 32**8 = 2**40 codes; only root can try one, ten minutes at a time
CODE_TTL_S = 600.0
REMIND_EVERY_S = 60.0
MAX_CODES_PER_HOUR = 10
CAP_WINDOW_S = 3600.0  # the hour MAX_CODES_PER_HOUR is counted over
NAME_CHARS = 64

PAIRED_TEXT = "You're paired: I'm yours now. Say hello, or send /help to see what I can do."


@dataclass(frozen=True, slots=True)
class Offer:
    """What a stranger's private message earns while unpaired: ``kind`` is "issue" (a new
    code), "remind" (the code sent earlier is still good) or "quiet" (nothing: asked again
    too soon, or too many codes this hour)."""

    kind: str
    reason: str = ""


def new_code() -> str:
    """A fresh code from the OS's CSPRNG."""
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def shown(code: str) -> str:
    """The code as the owner reads it: ``ABCD-EFGH``."""
    half = len(code) // 2
    return f"{code[:half]}-{code[half:]}"


def normalized(text: str) -> str:
    """What the owner typed, as issued: case, spaces and dashes do not matter. "" when it
    cannot be a code (wrong length, a letter the alphabet leaves out)."""
    code = "".join(text.split()).replace("-", "").upper()
    if len(code) != CODE_LENGTH or not all(c in CODE_ALPHABET for c in code):
        return ""
    return code


def digest(code: str) -> str:
    """What the store keeps of a code."""
    return hashlib.sha256(code.encode("ascii")).hexdigest()


def matching(code: str, issued: Iterable[PairingCode], now: float) -> PairingCode | None:
    """The unexpired, unredeemed code ``code`` names, compared in constant time against every
    candidate (no early exit that would time the search)."""
    wanted = digest(code).encode("ascii")
    found = None
    for row in issued:
        same = hmac.compare_digest(wanted, row.digest.encode("ascii"))
        if same and not row.redeemed_at and now < row.expires_at:
            found = row
    return found


def offer(outstanding: PairingCode | None, issued_last_hour: int, now: float) -> Offer:
    """What to do for a stranger's private message while unpaired (``outstanding``: their
    unexpired, unredeemed code, if any)."""
    if outstanding is not None:
        last = max(outstanding.issued_at, outstanding.reminded_at)
        if now - last < REMIND_EVERY_S:
            return Offer("quiet", "asked again within a minute")
        return Offer("remind")
    if issued_last_hour >= MAX_CODES_PER_HOUR:
        return Offer("quiet", f"{MAX_CODES_PER_HOUR} codes issued in the last hour")
    return Offer("issue")


def clean_name(text: object) -> str:
    """A Telegram display name or username fit for a log line, a terminal and a chat: printable
    characters only (no escape sequences, no right-to-left overrides), at most ``NAME_CHARS``."""
    if not isinstance(text, str):
        return ""
    return "".join(c for c in text if c.isprintable())[:NAME_CHARS].strip()


def who(name: str, username: str, user_id: int) -> str:
    """``Ada (@ada, id 123456)``: how the owner is named at the terminal and in the audit."""
    handle = f"@{username}, " if username else ""
    return f"{name or 'someone'} ({handle}id {user_id})"


def _clock(at: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(at))


def code_text(code: str, name: str) -> str:
    """The message that carries a new code."""
    minutes = round(CODE_TTL_S / 60)
    return (
        f"Hi {name or 'there'}! I don't have an owner yet. If you are setting me up, run this "
        f"on my device within {minutes} minutes:\n\n"
        f"sudo shelldon pair {shown(code)}\n\n"
        "If you are not, there is nothing to do here: I only answer my owner."
    )


def reminder_text(row: PairingCode) -> str:
    """The answer to a message from someone whose code is still good (the code is not kept,
    so it is not repeated)."""
    return (
        f"I sent you a pairing code at {_clock(row.issued_at)}; it works until "
        f"{_clock(row.expires_at)}: sudo shelldon pair CODE on my device. "
        "Write again after that for a new one."
    )
