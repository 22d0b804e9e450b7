"""The service's main process (which holds the secrets) forks no model-written code: while a
turn's worker runs a slow tool and a gate's pytest sleeps in its test, both descend from the
zygote, and the zygote is the main process's only child."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests import proctree

from .harness import Service, parent_of

pytestmark = pytest.mark.slow

NAP_CODE = """\
DESCRIPTION = "Say hello."
PARAMS_SCHEMA = {"type": "object", "properties": {}}


def run():
    return "hello"
"""
NAP_TEST = """\
import time

from nap import run


def test_hello():
    time.sleep(6)
    assert run() == "hello"
"""
SCRIPT = [
    {
        "when": "make",
        "tool_calls": [
            {"name": "propose_tool", "args": {"name": "nap", "code": NAP_CODE, "test": NAP_TEST}}
        ],
    },
    {"when": "make", "text": "Proposed."},
    {
        "when": "slow",
        "tool_calls": [{"name": "python_eval", "args": {"code": "sum(range(6 * 10**8))"}}],
    },
    {"when": "slow", "text": "The slow sum is done."},
]


def ancestors(pid: int, stop: int) -> list[int]:
    """``pid``'s parents, nearest first, up to ``stop`` (or the top of the tree)."""
    chain = []
    while pid not in (stop, 0, 1):
        pid = parent_of(pid)
        chain.append(pid)
    return chain


def gate_runs(main: int) -> set[int]:
    """Processes below ``main`` running the gate's pytest (its probe plugin on the command
    line)."""
    found = set()
    for pid in proctree.with_descendants({main}):
        try:
            if b"_shelldon_gate_probe" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            continue
    return found


def test_no_worker_and_no_gate_run_is_a_child_of_the_main_process(tmp_path: Path) -> None:
    main = os.getpid()
    svc = Service(tmp_path / "home", SCRIPT, SHELLDON_LIMITS_TURN_TIMEOUT_S="60")
    try:
        svc.say("make a tool")
        svc.expect("Proposed.")
        svc.say("do the slow thing")
        until = time.monotonic() + 10
        gates, workers = gate_runs(main), svc.turn_workers()
        while not (gates and workers):
            assert time.monotonic() < until, (gates, workers)
            time.sleep(0.05)
            gates, workers = gate_runs(main), svc.turn_workers()
        zygote = svc.zygote.pid
        tree = proctree.with_descendants({main}) - {main}
        assert {pid for pid in tree if parent_of(pid) == main} == {zygote}
        for pid in gates | workers:
            chain = ancestors(pid, main)
            assert zygote in chain and chain[-1] == main, (pid, chain)
    finally:
        svc.stop()
