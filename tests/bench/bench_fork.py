"""Benchmark the per-turn fork and the loop: prints figures, not a pytest test.

Run: .venv/bin/python tests/bench/bench_fork.py
On a machine busy with other work, `chrt -f 10 .venv/bin/python tests/bench/bench_fork.py`
measures the code rather than the scheduler's queue (its forks inherit the priority).

1. fork → worker ready: from calling spawn_turn to the moment the child has reset signals,
   closed inherited fds, scrubbed the environment, applied RLIMITs and called confine() — the
   child stamps that moment (CLOCK_MONOTONIC) into its first Job. Budget ≤ 5 ms median. For
   scale, fork → first Job on the parent's side too (registry built, prompt assembled, Job
   framed and sent), with an empty registry and with the real build_registry.
2. loop overhead per model round trip inside the worker, excluding the provider: run_turn with a
   brain that answers at once (six FREE tool rounds, then text). The brain's own time is
   subtracted, but the worker's share of the codec (encode the Job, decode the Completion) is
   counted. Budget ≤ 2 ms.
3. the same round trip over a real fork and socketpair, parent side included, for scale.
"""

from __future__ import annotations

import logging
import os
import select
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog

from shelldon.config import Settings, load_settings
from shelldon.contracts import (
    Completion,
    Job,
    JobFailed,
    Result,
    Tier,
    ToolCall,
    ToolDefinition,
    TurnRequest,
    decode,
    encode,
)
from shelldon.worker.handle import WorkerHandle
from shelldon.worker.loop import run_turn
from shelldon.worker.spawn import spawn_turn
from shelldon.worker.tools import (
    Registry,
    ToolSpec,
    build_registry,
    context_from_settings,
)

RUNS = 200
ROUNDS = 6


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def report(name: str, samples_s: list[float], budget_ms: float) -> None:
    ms = [s * 1000 for s in samples_s]
    med, p95 = statistics.median(ms), percentile(ms, 0.95)
    verdict = "within" if med <= budget_ms else "OVER"
    print(
        f"{name:<58} median {med:6.3f} ms   p95 {p95:6.3f} ms   "
        f"(n={len(ms)}, budget {budget_ms} ms median: {verdict})"
    )


def empty_registry(settings: Settings) -> Registry:
    return Registry(context_from_settings(settings))


def echo_registry(settings: Settings) -> Registry:
    registry = Registry(context_from_settings(settings))
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}}
    definition = ToolDefinition("echo", "echo x", schema, Tier.FREE)
    registry.add(ToolSpec(definition, lambda ctx, **kw: f"echo {kw}"))
    return registry


def first_frame(handle: WorkerHandle) -> object:
    while True:
        select.select([handle.sock], [], [], 5.0)
        frames = handle.read_frames()
        if frames:
            return frames[0]
        if handle.eof:
            raise RuntimeError(f"worker {handle.pid} closed without a frame")


def ready_stamp_registry(settings: Settings) -> Registry:
    """Runs in the child right after it is prepared: stamps that moment into a tool
    description, which the first Job carries back (CLOCK_MONOTONIC is shared by processes)."""
    ready_at = time.monotonic()
    registry = Registry(context_from_settings(settings))
    definition = ToolDefinition("ready", repr(ready_at), {"type": "object"}, Tier.FREE)
    registry.add(ToolSpec(definition, lambda ctx: ""))
    return registry


def bench_fork_ready(settings: Settings) -> None:
    request = TurnRequest("bench", 1, "hello")
    ready = []
    for _ in range(RUNS):
        started = time.monotonic()
        handle = spawn_turn(request, settings, registry_factory=ready_stamp_registry)
        frame = first_frame(handle)
        assert isinstance(frame, Job), frame
        stamp = next(t.description for t in frame.tools if t.name == "ready")
        ready.append(float(stamp) - started)
        handle.kill()
        handle.reap(block=True)
        handle.close()
    report("fork -> worker ready (fds, env, signals, rlimits, confine)", ready, 5.0)


def bench_fork_first_job(settings: Settings, factory: object, label: str) -> None:
    request = TurnRequest("bench", 1, "hello")
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        handle = spawn_turn(request, settings, registry_factory=factory)  # type: ignore[arg-type]
        frame = first_frame(handle)
        samples.append(time.perf_counter() - started)
        assert isinstance(frame, Job), frame
        handle.kill()
        handle.reap(block=True)
        handle.close()
    report(f"fork -> first Job on the parent's side, {label}", samples, 5.0)


def script() -> list[Completion]:
    rounds = [Completion(tool_calls=(ToolCall(f"c{i}", "echo", {"x": i}),)) for i in range(ROUNDS)]
    return [*rounds, Completion(text="all done")]


class InstantBrain:
    """Answers each Job at once from the script, timing only its own share of the work."""

    def __init__(self) -> None:
        self.answers = script()
        self.seconds = 0.0

    def __call__(self, job: Job) -> Completion | JobFailed:
        encode(job)  # the worker's share of the codec counts as loop overhead
        started = time.perf_counter()
        blob = encode(self.answers.pop(0))
        self.seconds += time.perf_counter() - started
        answer: Completion = decode(blob)
        return answer


def bench_loop_in_process(settings: Settings) -> None:
    registry = echo_registry(settings)
    samples = []
    for _ in range(RUNS):
        brain = InstantBrain()
        started = time.perf_counter()
        result = run_turn(TurnRequest("bench", 1, "hi"), registry, brain, settings, 1e12)
        total = time.perf_counter() - started
        assert result.model_calls == ROUNDS + 1, result
        samples.append((total - brain.seconds) / result.model_calls)
    report("loop overhead per model round trip (in the worker)", samples, 2.0)


def bench_round_trip_over_fork(settings: Settings) -> None:
    samples = []
    for _ in range(RUNS // 4):
        answers = script()
        handle = spawn_turn(TurnRequest("bench", 1, "hi"), settings, registry_factory=echo_registry)
        first_frame(handle)
        handle.send(answers.pop(0))
        calls = 1
        started = time.perf_counter()
        done = False
        while not done:
            select.select([handle.sock], [], [], 5.0)
            for frame in handle.read_frames():
                if isinstance(frame, Result):
                    done = True
                    break
                handle.send(answers.pop(0))
                calls += 1
        samples.append((time.perf_counter() - started) / calls)
        handle.reap(block=True)
        handle.close()
    report("model round trip over fork + socketpair (both sides)", samples, 2.0)


def main() -> None:
    # The spawn log line per fork would be most of what this prints; keep warnings only.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "workspace").mkdir(parents=True)
        (home / "vault").mkdir()
        settings = load_settings(environ={"SHELLDON_HOME": str(home)})
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, pid {os.getpid()}")
        bench_fork_ready(settings)
        bench_fork_first_job(settings, empty_registry, "empty registry")
        bench_fork_first_job(settings, build_registry, "build_registry")
        bench_loop_in_process(settings)
        bench_round_trip_over_fork(settings)


if __name__ == "__main__":
    main()
