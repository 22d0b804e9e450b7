"""Gate time for a small tool + one test (budget: <= 1.0 s), and where pytest start-up goes.

Run: .venv/bin/python tests/bench/bench_gate.py
Prints the whole gate (stage + AST checks + sandboxed pytest), the AST checks alone, and the
start-up cost of the pieces: a bare interpreter, ``import pytest``, pytest with entry-point
plugins autoloaded (what a naive ``python -m pytest`` costs here), and ours.
"""

from __future__ import annotations

import logging
import os
import resource
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shelldon.store import Store  # noqa: E402
from shelldon.toolbox.gate import _UNUSED_PLUGINS  # noqa: E402
from shelldon.toolbox.gate_scan import static_checks  # noqa: E402
from shelldon.toolbox.toolbox import Toolbox  # noqa: E402
from tests.unit.selfcode.samples import ADDER, ADDER_TEST  # noqa: E402

BUDGET_S = 1.0
RUNS = 10


def costs(variants: dict[str, tuple[list[str], dict[str, str]]], cwd: Path, rounds: int = 11):
    """Median wall and CPU seconds (user + sys of the child) per variant, run round-robin so
    a burst of load on the machine hits every variant alike."""
    walls: dict[str, list[float]] = {k: [] for k in variants}
    cpus: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for label, (argv, env) in variants.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run(argv, cwd=cwd, env=env, capture_output=True, check=False)
            walls[label].append(time.perf_counter() - t)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus[label].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return {k: (statistics.median(walls[k]), statistics.median(cpus[k])) for k in variants}


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "shelldon.db")
        sc = Toolbox(Path(tmp) / "toolbox", store)
        gates = []
        for _ in range(RUNS):
            t = time.perf_counter()
            report = sc.run_gate(sc.stage("adder", ADDER, ADDER_TEST))
            gates.append(time.perf_counter() - t)
            assert report.passed, report
        store.close()
        t = time.perf_counter()
        for _ in range(100):
            static_checks("adder", ADDER, ADDER_TEST)
        static_ms = (time.perf_counter() - t) * 10

        work = Path(tmp) / "bare"
        work.mkdir()
        (work / "adder.py").write_text(ADDER)
        (work / "test_adder.py").write_text(ADDER_TEST)
        (work / "empty.ini").write_text("[pytest]\n")
        py = sys.executable
        base_env = {"PATH": "/usr/bin:/bin", "HOME": str(work), "PYTHONDONTWRITEBYTECODE": "1"}
        quiet_env = {**base_env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        common = [py, "-m", "pytest", "-q", "-c", "empty.ini", "--rootdir", ".", "--noconftest"]
        no_plugins = [a for p in _UNUSED_PLUGINS for a in ("-p", f"no:{p}")]
        site_path = {**quiet_env, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
        ours = [*common, *no_plugins, "test_adder.py"]
        figures = costs(
            {
                "python -c pass": ([py, "-c", "pass"], base_env),
                "python -c 'import pytest'": ([py, "-c", "import pytest"], base_env),
                "pytest, entry-point plugins autoloaded": (
                    [*common, "-p", "no:cacheprovider", "test_adder.py"],
                    base_env,
                ),
                "pytest, autoload off": (
                    [*common, "-p", "no:cacheprovider", "test_adder.py"],
                    quiet_env,
                ),
                "pytest, autoload off + unused builtins off": (ours, quiet_env),
                "  + python -S (no .pth files; site-packages on PYTHONPATH)": (
                    [py, "-S", *ours[1:]],
                    site_path,
                ),
            },
            work,
        )

    p50, worst = statistics.median(gates), max(gates)
    print(f"gate of a small tool + one test, {RUNS} runs (stage + AST + pytest subprocess):")
    print(f"  p50 {p50:.3f} s   min {min(gates):.3f} s   max {worst:.3f} s   budget {BUDGET_S} s")
    print(f"  AST checks alone: {static_ms:.2f} ms")
    print("start-up pieces (median of 11, round-robin):                 wall      CPU")
    for label, (seconds, cpu) in figures.items():
        print(f"  {label:58s} {seconds:.3f} s  {cpu:.3f} s")
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("PASS" if p50 <= BUDGET_S else "OVER BUDGET")


if __name__ == "__main__":
    main()
