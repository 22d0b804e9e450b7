"""Ctrl-C in `shelldon chat`: exit 130 with a one-line notice; the turn it cut short is not
answered out of context at the next start (a console owner who left has left that
conversation), and the next session says so once."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import BinaryIO

import pytest

from .harness import chat_service

pytestmark = pytest.mark.slow

SCRIPT = [
    {
        "when": "slow",
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(6 * 10**8))"}}],
    },
    {"when": "slow", "text": "The slow sum is done."},
    {"when": "time", "text": "It is tea time."},
]


def read_until(out: BinaryIO, needle: bytes, timeout: float) -> bytes:
    """Read ``out`` (what chat_service has buffered first) until ``needle`` appears. The fd is
    non-blocking, so an empty read means "nothing yet" (the deadline bounds the wait)."""
    os.set_blocking(out.fileno(), False)
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen:
        assert time.monotonic() < deadline, f"{needle!r} did not appear; saw {seen!r}"
        try:
            chunk = out.read1(65536)  # type: ignore[attr-defined]
        except BlockingIOError:
            chunk = None
        if not chunk:
            time.sleep(0.05)
            continue
        seen += chunk
    return seen


def test_ctrl_c_mid_turn_exits_130_and_the_cut_turn_is_not_answered_later(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "script.json").write_text(json.dumps(SCRIPT))
    env = {"SHELLDON_BRAIN_SCRIPT": "script.json", "SHELLDON_LIMITS_TURN_TIMEOUT_S": "60"}
    with chat_service(home, **env) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"do the slow thing\n")
        proc.stdin.flush()
        time.sleep(1.0)  # the turn is running: its python_eval takes several seconds
        os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C
        assert proc.wait(timeout=10) == 130
        rest = proc.stdout.read()
        assert rest.endswith(b"shelldon: interrupted (Ctrl-C)\n"), rest
        assert b"slow sum is done" not in rest
    with chat_service(home, **env) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        said = read_until(proc.stdout, b"won't answer", 20)
        assert b"An earlier session ended before I answered 'do the slow thing'" in said
        proc.stdin.write(b"what time is it?\n")
        proc.stdin.flush()
        said += read_until(proc.stdout, b"It is tea time.", 30)
        proc.stdin.close()
        assert proc.wait(timeout=15) == 0
        os.set_blocking(proc.stdout.fileno(), True)
        said += proc.stdout.read()
        assert b"slow sum is done" not in said
        assert said.count(b"won't answer") == 1
