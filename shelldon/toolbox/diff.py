"""What a replacement changes: a unified diff of a tool's code and test against the live
version, the same text on the Telegram card, at the console and in ``shelldon tools import``.

The diff is of model-written text: whoever shows it marks hidden characters (the transports
do), so nothing here trusts it; this module only compares.
"""

from __future__ import annotations

import datetime as dt
import difflib

__all__ = ["replacement_diff", "replaces_line"]

_CONTEXT_LINES = 3


def _lines(data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return text.splitlines(keepends=True)


def _one_diff(old: bytes | str, new: bytes | str, old_name: str, new_name: str) -> str:
    lines = list(
        difflib.unified_diff(
            _lines(old), _lines(new), old_name, new_name, n=_CONTEXT_LINES, lineterm="\n"
        )
    )
    # A last line without a newline would run into the next file's header.
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def replacement_diff(
    name: str,
    live_code: bytes | str,
    live_test: bytes | str,
    new_code: bytes | str,
    new_test: bytes | str,
) -> str:
    """The unified diff of tool ``name``'s code, then its test, live version against the new
    one; a part that did not change says so, so an empty diff is never ambiguous."""
    parts = []
    for what, old, new in (
        (f"{name}.py", live_code, new_code),
        (f"test_{name}.py", live_test, new_test),
    ):
        diff = _one_diff(old, new, f"live/{what}", f"new/{what}")
        parts.append(diff if diff else f"(no change to {what})\n")
    return "".join(parts)


def replaces_line(name: str, approved_at: float, state: str = "live") -> str:
    """The card's line for a replacement: "replaces NAME (live since …)" (a quarantined tool
    says so, with when it was approved)."""
    since = dt.datetime.fromtimestamp(approved_at, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if state == "live":
        return f"replaces {name} (live since {since})"
    return f"replaces {name} ({state}; approved {since})"
