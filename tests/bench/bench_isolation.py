"""What running each self-coded call in its own child costs (issue 17, budget: <= 10 ms a call).

Run: .venv/bin/python tests/bench/bench_isolation.py [calls]
Prints p50/p95 of one call of a small live tool through ``execute_tool`` (a child forked per
call, as a worker does it), next to the same module loaded and run in-process (what the worker
did before). The process is made about a worker's size first: the registry of built-in tools
and the runtime a worker has imported.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shelldon.config import load_settings  # noqa: E402
from shelldon.contracts import ToolCall  # noqa: E402
from shelldon.store import Store  # noqa: E402
from shelldon.toolbox.manifest import code_hash  # noqa: E402
from shelldon.toolbox.toolbox import Toolbox  # noqa: E402
from shelldon.worker.tools import build_registry  # noqa: E402
from shelldon.worker.tools.registry import execute_tool  # noqa: E402
from shelldon.worker.tools.selfcoded import load_module  # noqa: E402

BUDGET_MS = 10.0
TOOL = """\
import re

DESCRIPTION = "Count the words in a text."
PARAMS_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


def run(text=""):
    return str(len(re.findall(r"\\w+", text)))
"""


def timed(fn: object, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append((time.perf_counter() - t0) * 1000)
    return out


def report(label: str, samples: list[float]) -> float:
    samples = sorted(samples)
    p50 = statistics.median(samples)
    p95 = samples[int(len(samples) * 0.95) - 1]
    print(f"  {label:<34} p50 {p50:6.2f} ms   p95 {p95:6.2f} ms")
    return p50


def main() -> None:
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    logging.disable(logging.CRITICAL)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(environ={"SHELLDON_HOME": tmp})
        settings.workspace.mkdir(parents=True, exist_ok=True)
        with Store(settings.database) as store:
            sc = Toolbox.from_settings(settings, store)
            staged = sc.stage("words", TOOL, "")
            shutil.rmtree(staged.directory)
            path = sc.promote(staged.name, staged.code, staged.test, expected_hash=staged.code_hash)
        os.chdir(settings.workspace)
        registry = build_registry(settings)
        # This process has no filesystem layer on (a worker would): let the tool run here.
        registry.context = dataclasses.replace(registry.context, require_fs_layer=False)
        call = ToolCall("c1", "words", {"text": "one two three"})
        assert execute_tool(registry, call).content == "3"
        digest = code_hash(path.read_bytes())

        def inline() -> str:
            return str(load_module(path, digest).run(text="one two three"))

        print(f"one self-coded call, {calls} calls (pid {os.getpid()})")
        timed(lambda: execute_tool(registry, call), 10)
        isolated = report("in a child (now)", timed(lambda: execute_tool(registry, call), calls))
        inproc = report("in the worker (before)", timed(inline, calls))
        print(f"  cost of the child                  {isolated - inproc:6.2f} ms a call")
        print(f"  budget                             {BUDGET_MS:6.2f} ms a call")


if __name__ == "__main__":
    main()
