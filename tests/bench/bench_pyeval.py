"""End-to-end cost of python_eval and of the jailed file tools: prints figures, not a pytest test.

Run: .venv/bin/python tests/bench/bench_pyeval.py

1. a trivial ``python_eval`` through ``execute_tool`` (guard, fork, RLIMITs, eval, repr, pipe,
   reap) — it must stay a few milliseconds;
2. the guard alone (parse + AST walk) on a typical expression;
3. how long after the wall-clock limit a C-level CPU bomb is killed and reaped;
4. ``read_file`` and ``list_dir`` through ``execute_tool`` (jail resolution included).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shelldon.config import load_settings  # noqa: E402
from shelldon.contracts import ToolCall  # noqa: E402
from shelldon.worker.tools import build_registry, execute_tool  # noqa: E402
from shelldon.worker.tools.pyeval import check_expression  # noqa: E402

structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def timed_ms(fn: Callable[[], object], runs: int) -> list[float]:
    fn()  # warm up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def cpu_ms_per_call(fn: Callable[[], object], runs: int) -> float:
    """CPU time (user + system, this process and its reaped children) per call: unlike wall
    time, it does not grow when the machine is busy with other work."""

    def used() -> float:
        me, kids = (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
        return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime

    fn()
    before = used()
    for _ in range(runs):
        fn()
    return (used() - before) * 1000 / runs


def report(label: str, samples: list[float]) -> None:
    ordered = sorted(samples)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    print(f"{label:<52} p50 {statistics.median(ordered):7.3f} ms   p95 {p95:7.3f} ms")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "workspace" / "notes").mkdir(parents=True)
        (home / "vault").mkdir()
        (home / "workspace" / "notes" / "todo.txt").write_text("feed shelldon\n" * 200)
        registry = build_registry(load_settings(environ={"SHELLDON_HOME": str(home)}))

        def run(name: str, **args: object) -> Callable[[], object]:
            return lambda: execute_tool(registry, ToolCall("b", name, dict(args)))

        print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
        trivial = run("python_eval", code="1 + 1")
        report("python_eval('1 + 1') end to end", timed_ms(trivial, 200))
        cpu = cpu_ms_per_call(trivial, 200)
        print(f"{'  CPU per call, parent + child':<52} {cpu:7.3f} ms")
        report(
            "python_eval(sorted comprehension) end to end",
            timed_ms(run("python_eval", code="sorted(x * x % 7 for x in range(100))"), 200),
        )
        report(
            "guard only: check_expression (no fork)",
            timed_ms(lambda: check_expression("sorted(x * x % 7 for x in range(100))"), 2000),
        )
        registry.context = dataclasses.replace(registry.context, eval_timeout_s=0.5)
        bomb = timed_ms(run("python_eval", code="sum(range(10**12))"), 5)
        report("sum(range(10**12)) at a 0.5 s limit: kill + reap", bomb)
        print(f"{'  overshoot past the limit':<52} max {max(bomb) - 500:7.3f} ms")
        report(
            "read_file('notes/todo.txt') (2.8 KB)",
            timed_ms(run("read_file", path="notes/todo.txt"), 2000),
        )
        report("list_dir('.')", timed_ms(run("list_dir", path="."), 2000))


if __name__ == "__main__":
    main()
