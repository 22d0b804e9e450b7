"""What confining an owner-approved call costs (issue 18, budget: <= 15 ms over unconfined).

Run: .venv/bin/python tests/bench/bench_approved.py [calls]
For ``write_file`` and ``run_shell "true"``: the call run in the process (as before) against the
same call through ``run_approved`` (a child that applies the filesystem layer and the seccomp
filter prepared for it), per filesystem layer this machine has.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shelldon.config import Settings, load_settings  # noqa: E402
from shelldon.contracts import ToolCall  # noqa: E402
from shelldon.proc import sandbox  # noqa: E402
from shelldon.worker.approved import run_approved  # noqa: E402
from shelldon.worker.tools import build_registry  # noqa: E402
from shelldon.worker.tools.registry import execute_tool  # noqa: E402

BUDGET_MS = 15.0
CALLS = {
    "write_file": ToolCall("c1", "write_file", {"path": "note.txt", "content": "hello"}),
    "run_shell true": ToolCall("c2", "run_shell", {"command": "true"}),
}


def p50(fn: Callable[[], object], n: int) -> float:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def with_layer(settings: Settings, fs: str) -> Settings:
    return dataclasses.replace(settings, sandbox=dataclasses.replace(settings.sandbox, fs=fs))


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    logging.disable(logging.CRITICAL)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    layers = ["none"]
    if sandbox.landlock_abi() > 0:
        layers.append("landlock")
    if sandbox.userns_available():
        layers.append("userns")
    with tempfile.TemporaryDirectory() as tmp:
        base = load_settings(environ={"SHELLDON_HOME": tmp})
        base.workspace.mkdir(parents=True)
        os.chdir(base.workspace)
        registry = build_registry(base)
        print(f"approved call, p50 of {n}, ms")
        for name, call in CALLS.items():
            inline = p50(lambda call=call: execute_tool(registry, call, approved=True), n)
            print(f"  {name:<16} {'in the worker (before)':<25} {inline:7.2f}")
            for fs in layers:
                c = sandbox.prepare_call(with_layer(base, fs))
                confined = p50(lambda c=c, call=call: run_approved(registry, call, c), n)
                extra = confined - inline
                verdict = "ok" if extra <= BUDGET_MS else "OVER BUDGET"
                label = f"confined child, {fs}"
                print(f"  {name:<16} {label:<25} {confined:7.2f}  (+{extra:.2f}, {verdict})")


if __name__ == "__main__":
    main()
