"""What each sandbox layer costs per turn and per gate run: prints figures, not a pytest test.

Run: .venv/bin/python tests/bench/bench_sandbox.py

1. A whole turn in a real forked worker (spawn → one FREE read_file call → final Result), with
   the real build_registry, for each configuration: sandbox off; seccomp alone (fs=none);
   seccomp + Landlock; seccomp + user/mount namespace; Landlock + a cgroup per turn (when a
   cgroup v2 directory can be made here); the filesystem layers with and without their PID
   namespace (sandbox.pidns). The layer's cost is its median minus "off"'s.
2. The confinement call alone, timed inside the child (confine_worker), per layer.
3. A gate run (static checks + sandboxed pytest) of a small tool, off vs each layer.
"""

from __future__ import annotations

import dataclasses
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
from shelldon.contracts import Completion, Job, Result, ToolCall, TurnRequest, Usage
from shelldon.proc import sandbox
from shelldon.store import Store
from shelldon.toolbox.toolbox import Toolbox
from shelldon.worker.spawn import spawn_turn

TURNS = 100
GATES = 8
CGROUP_V2 = Path("/sys/fs/cgroup/unified")


def quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


def variant(
    settings: Settings, mode: str, fs: str, cgroup: str = "", pidns: str = "auto"
) -> Settings:
    box = dataclasses.replace(settings.sandbox, mode=mode, fs=fs, cgroup=cgroup, pidns=pidns)
    return dataclasses.replace(settings, sandbox=box)


def one_turn(settings: Settings) -> float:
    started = time.perf_counter()
    handle = spawn_turn(TurnRequest("t-bench", 1, "read"), settings)
    answers = [
        Completion("", (ToolCall("c1", "read_file", {"path": "notes.txt"}),), Usage(1, 1)),
        Completion("done", (), Usage(1, 1)),
    ]
    try:
        while True:
            select.select([handle.sock], [], [], 5)
            frames = handle.read_frames()
            if any(isinstance(f, Result) for f in frames):
                break
            for frame in frames:
                if isinstance(frame, Job):
                    handle.send(answers.pop(0))
            if handle.eof:
                raise RuntimeError("worker died")
        handle.reap(block=True)
    finally:
        handle.kill()
        handle.reap(block=True)
        handle.close()
    return (time.perf_counter() - started) * 1000


def confine_only(settings: Settings) -> float:
    """The confine_worker call alone, timed in a forked child (parent prepared as spawn does)."""
    confinement = sandbox.prepare_worker(settings)
    group = confinement.cgroup
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover
        t0 = time.perf_counter()
        try:
            sandbox.confine_worker(confinement, network=False, join_cgroup=True)
        finally:
            os.write(write_end, f"{(time.perf_counter() - t0) * 1000:.4f}".encode())
            os._exit(0)
    os.close(write_end)
    value = float(os.read(read_end, 64).decode() or "nan")
    os.close(read_end)
    os.waitpid(pid, 0)
    if group is not None:
        group.close()
    return value


def gate_once(settings: Settings) -> float:
    with Store(settings.database) as store:
        return _gate(Toolbox.from_settings(settings, store))


def _gate(sc: Toolbox) -> float:
    code = (
        'DESCRIPTION = "Add one."\n'
        'PARAMS_SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}\n\n\n'
        "def run(a):\n    return str(a + 1)\n"
    )
    test = "from adder import run\n\n\ndef test_adds():\n    assert run(a=1) == '2'\n"
    report = sc.run_gate(sc.stage("adder", code, test, replace=True))
    if not report.passed:
        raise RuntimeError(f"gate failed: {report.findings} {report.output[-500:]}")
    return report.duration_s * 1000


def main() -> None:
    quiet()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "workspace").mkdir(parents=True)
        (home / "workspace" / "notes.txt").write_text("hello")
        base = load_settings(environ={"SHELLDON_HOME": str(home)})
        configs = [
            ("off", variant(base, "off", "none")),
            ("seccomp only", variant(base, "best-effort", "none")),
            ("seccomp + landlock", variant(base, "best-effort", "landlock")),
            ("seccomp + landlock, no pidns", variant(base, "best-effort", "landlock", pidns="off")),
            ("seccomp + userns", variant(base, "best-effort", "userns")),
            ("seccomp + userns, no pidns", variant(base, "best-effort", "userns", pidns="off")),
        ]
        cg: Path | None = None
        if (CGROUP_V2 / "cgroup.procs").exists() and os.access(CGROUP_V2, os.W_OK):
            cg = CGROUP_V2 / f"shelldon-bench-{os.getpid()}"
            cg.mkdir()
            configs.append(
                ("seccomp + landlock + cgroup", variant(base, "best-effort", "landlock", str(cg)))
            )
        try:
            print(f"plan here: {sandbox.plan(base.sandbox)}; landlock ABI {sandbox.landlock_abi()}")
            print(f"\n1. whole turn (fork → 1 FREE tool → Result), {TURNS} turns, ms")
            times: dict[str, list[float]] = {name: [] for name, _ in configs}
            for _name, settings in configs:
                one_turn(settings)  # warm: detection, filter build, path lists
            # Interleaved, so a neighbour's load spike hits every configuration alike.
            for _ in range(TURNS):
                for name, settings in configs:
                    times[name].append(one_turn(settings))
            off = statistics.median(times["off"])
            for name, values in times.items():
                p50 = statistics.median(values)
                p95 = sorted(values)[int(0.95 * (len(values) - 1))]
                print(f"  {name:30s} p50 {p50:6.2f}  p95 {p95:6.2f}  (+{p50 - off:5.2f})")
            print("\n2. confine_worker alone, in the child, ms (median of 30)")
            for name, settings in configs[1:]:
                values = [confine_only(settings) for _ in range(30)]
                print(f"  {name:30s} {statistics.median(values):6.2f}")
            print(f"\n3. gate run of a small tool + test, {GATES} runs, ms")
            # Not "off": no model-written code runs unconfined, so that gate refuses to run.
            for name, settings in configs[1:5]:
                gate_once(settings)
                values = [gate_once(settings) for _ in range(GATES)]
                print(f"  {name:30s} p50 {statistics.median(values):7.1f}")
        finally:
            if cg is not None:
                sandbox.TurnCgroup(cg).close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
