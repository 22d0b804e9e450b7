"""Benchmark spawning through the zygote: prints figures, not a pytest test.

Run: .venv/bin/python tests/bench/bench_zygote.py [runs]

1. spawn through the zygote -> the worker's first Job on the service's side, with the real
   build_registry, three ways:
   - with the spare (the default), waiting before each spawn until the spare is idle (as
     between real turns; the wait is not timed): control round trip, toolbox fingerprint,
     Assignment + one-byte ack on the spare's channel, SCM_RIGHTS, prompt assembled, Job
     framed; no fork, no preparation;
   - with the spare, back to back (the next spawn right after the previous turn's close: the
     spare forked after the last spawn may still be preparing);
   - without the spare (``spare=False``): discovery + fork in the zygote, worker prepared,
     registry built, then the same;
   and the same forked directly by this process (spawn.spawn_turn) for scale. Median of
   ``runs`` (default 50) each. "spawn call" is how long ``spawn_turn`` itself blocks.
2. the zygote's end of a killed turn: kill() + reap(block=True) + close() through the zygote.
3. the zygote's memory: PSS from /proc/<pid>/smaps_rollup, idle after the runs.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from shelldon.config import Settings, load_settings
from shelldon.contracts import Job, TurnRequest
from shelldon.worker.handle import WorkerHandle
from shelldon.worker.spawn import spawn_turn
from shelldon.worker.zygote import Zygote

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.bench_fork import first_frame
from tests.pids import inner


def wait_idle_spare(zygote: Zygote) -> None:
    """Until the zygote's spare is prepared and blocked waiting for its turn."""
    pid = zygote.spare_pid()
    until = time.monotonic() + 5
    while pid is not None and time.monotonic() < until:
        # In a PID namespace of its own the spare is the stub's child (the stub waits in wait4).
        if "poll" in Path(f"/proc/{inner(pid)}/wchan").read_text():
            return
        time.sleep(0.001)


def report(name: str, samples_s: list[float]) -> None:
    ms = sorted(s * 1000 for s in samples_s)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    print(f"{name:<58} median {statistics.median(ms):6.3f} ms   p95 {p95:6.3f} ms   (n={len(ms)})")


def measure(
    spawn: Callable[[TurnRequest], WorkerHandle],
    runs: int,
    before: Callable[[], None] = lambda: None,
    calls: list[float] | None = None,
) -> tuple[list[float], list[float]]:
    to_job, to_end = [], []
    for n in range(runs):
        before()
        started = time.perf_counter()
        handle = spawn(TurnRequest(f"bench-{n}", 1, "hello"))
        if calls is not None:
            calls.append(time.perf_counter() - started)
        frame = first_frame(handle)
        to_job.append(time.perf_counter() - started)
        assert isinstance(frame, Job), frame
        started = time.perf_counter()
        handle.kill()
        handle.reap(block=True)
        handle.close()
        to_end.append(time.perf_counter() - started)
    return to_job, to_end


def pss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return -1


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "workspace").mkdir(parents=True)
        (home / "vault").mkdir()
        settings: Settings = load_settings(environ={"SHELLDON_HOME": str(home)})
        zygote = Zygote.start(settings)
        try:
            ready = lambda: wait_idle_spare(zygote)  # noqa: E731
            measure(zygote.spawn_turn, 3, ready)  # warm-up
            calls: list[float] = []
            to_job, to_end = measure(zygote.spawn_turn, runs, ready, calls)
            report("zygote+spare (idle): spawn -> worker's first Job", to_job)
            report("zygote+spare (idle): spawn call", calls)
            report("zygote+spare: kill + reap(block=True) + close", to_end)
            calls = []
            to_job, _ = measure(zygote.spawn_turn, runs, calls=calls)
            report("zygote+spare (back to back): spawn -> first Job", to_job)
            report("zygote+spare (back to back): spawn call", calls)
            wait_idle_spare(zygote)
            spare = zygote.spare_pid()
            print(f"zygote PSS idle: {pss_kb(zygote.pid) / 1024:.1f} MB", end="")
            print(f", its spare's: {pss_kb(spare) / 1024:.1f} MB" if spare else "")
        finally:
            zygote.stop()

        zygote = Zygote.start(settings, spare=False)
        try:
            measure(zygote.spawn_turn, 3)  # warm-up
            calls = []
            to_job, to_end = measure(zygote.spawn_turn, runs, calls=calls)
            report("zygote, no spare: spawn -> worker's first Job", to_job)
            report("zygote, no spare: spawn call", calls)
            report("zygote, no spare: kill + reap(block=True) + close", to_end)
        finally:
            zygote.stop()

        def direct(request: TurnRequest) -> WorkerHandle:
            return spawn_turn(request, settings)

        measure(direct, 3)
        to_job, to_end = measure(direct, runs)
        report("direct fork: spawn -> worker's first Job (real registry)", to_job)
        report("direct fork: kill + reap(block=True) + close", to_end)


if __name__ == "__main__":
    main()
