"""Compare Thespian's bases for shelldon on a 416 MB Pi: memory, latency, ThespianWatch, start-up.

Run: ``.venv/bin/python tests/bench/bench_bases.py``. Each base runs in a fresh interpreter
(``--one BASE``) with 8 trivial actors (simpleSystemBase driven by shelldon's event loop,
``actors/inproc.py``, as in production); the figures are:

- PSS idle: ``Pss`` from ``/proc/PID/smaps_rollup`` summed over the system's processes, and
  the same plus the starting process (the service's main process); RSS would double-count.
- actor-to-actor round trip: one actor pings another and times each answer (p50/p95).
- ThespianWatch: does a watched pipe wake the actor with a ``WatchMessage``?
- start-up: ``start_actor_system`` to ready, and to 8 actors answering.
- log event: cost of one stdlib ``logging`` record inside an actor (stdout to /dev/null).

The multiprocess bases run as Thespian ships them (shelldon no longer supports them: this bench
is the measurement behind running every actor in one process).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

BASES = ("multiprocTCPBase", "multiprocUDPBase", "multiprocQueueBase", "simpleSystemBase")
ACTORS = 8
ROUND_TRIPS = 400
LOG_EVENTS = 200

from thespian.actors import Actor, ActorAddress, WatchMessage  # noqa: E402

from tests import proctree  # noqa: E402


@dataclass(frozen=True)
class Ping:
    """One leg of a round trip."""

    seq: int


@dataclass(frozen=True)
class Measure:
    """Ask a pinger to time ``count`` round trips to ``peer``."""

    peer: Any
    count: int


@dataclass(frozen=True)
class Probe:
    """Ask an actor to check ThespianWatch, or to time ``count`` log records."""

    what: str
    count: int = 0


class Trivial(Actor):  # type: ignore[misc]
    """Answers a ping; can check ThespianWatch and time log records."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: tuple[int, ActorAddress] | None = None

    def receiveMessage(self, msg: Any, sender: ActorAddress) -> Any:
        if isinstance(msg, Ping):
            self.send(sender, msg)
        elif isinstance(msg, Probe) and msg.what == "log":
            started = time.perf_counter()
            for i in range(msg.count):
                logging.getLogger("bench").warning("bench record %d", i)
            self.send(sender, (time.perf_counter() - started) / msg.count)
        elif isinstance(msg, Probe) and msg.what == "watch":
            reader, writer = os.pipe()
            os.write(writer, b"x")
            self.pending = (reader, sender)
            self.wakeupAfter(timedelta(seconds=1))
            return _watch([reader])
        elif isinstance(msg, WatchMessage) and self.pending:
            reader, asker = self.pending
            self.pending = None
            os.close(reader)
            self.send(asker, True)
        elif self.pending:  # the WakeupMessage: no WatchMessage came within a second
            reader, asker = self.pending
            self.pending = None
            self.send(asker, False)
        return None


def _watch(fds: list[int]) -> Any:
    from thespian.actors import ThespianWatch

    return ThespianWatch(fds)


class Pinger(Trivial):
    """Times round trips to a peer actor."""

    def __init__(self) -> None:
        super().__init__()
        self.asker: ActorAddress | None = None
        self.peer: Any = None
        self.left = 0
        self.sent_at = 0.0
        self.times: list[float] = []

    def receiveMessage(self, msg: Any, sender: ActorAddress) -> Any:
        if isinstance(msg, Measure):
            self.asker, self.peer, self.left, self.times = sender, msg.peer, msg.count, []
            self.sent_at = time.perf_counter()
            self.send(self.peer, Ping(0))
            return None
        if isinstance(msg, Ping) and sender == self.peer and self.asker is not None:
            self.times.append(time.perf_counter() - self.sent_at)
            self.left -= 1
            if self.left > 0:
                self.sent_at = time.perf_counter()
                self.send(self.peer, Ping(msg.seq + 1))
            else:
                self.send(self.asker, self.times)
            return None
        return super().receiveMessage(msg, sender)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _measure_one(base: str) -> dict[str, Any]:
    port = _free_port()
    started = time.monotonic()
    inproc = False
    if base == "simpleSystemBase":
        from actors.system import start_actor_system

        system = start_actor_system()
        inproc = True
    else:
        from thespian.actors import ActorSystem

        system = ActorSystem(base, {"Admin Port": port}, transientUnique=True)
    ready_ms = (time.monotonic() - started) * 1000
    ask = system.ask
    if inproc:
        # shelldon's event loop for this base (actors/inproc.py): watches, wake-ups, asks.
        from actors.inproc import Driver

        ask = Driver(system).ask
    try:
        pinger = system.createActor(Pinger)
        others = [system.createActor(Trivial) for _ in range(ACTORS - 1)]
        for actor in (pinger, *others):
            assert ask(actor, Ping(0), 10) is not None, "actor did not answer"
        actors_ms = (time.monotonic() - started) * 1000
        time.sleep(1.0)  # idle
        # The Admin's children inherit its listener: take them all with their trees.
        pids = set() if inproc else proctree.with_descendants(proctree.listeners_on_port(port))
        # The in-process base has no processes of its own: the starter is the whole system.
        starter_kib = proctree.pss_kib([os.getpid()]) if pids else 0
        system_kib = proctree.pss_kib(pids or [os.getpid()])
        times = ask(pinger, Measure(others[0], ROUND_TRIPS), 60)
        assert isinstance(times, list), f"no round-trip figures: {times!r}"
        ms = sorted(t * 1000 for t in times)
        watch = ask(others[1], Probe("watch"), 5)
        log_cost = ask(others[2], Probe("log", LOG_EVENTS), 30)
        return {
            "base": base,
            "processes": len(pids) if pids else 0,
            "pss_system_mb": system_kib / 1024,
            "pss_with_starter_mb": (system_kib + starter_kib) / 1024,
            "rtt_p50_ms": statistics.median(ms),
            "rtt_p95_ms": ms[int(len(ms) * 0.95) - 1],
            "watch": bool(watch),
            "ready_ms": ready_ms,
            "eight_actors_ms": actors_ms,
            "log_event_ms": (log_cost or 0.0) * 1000,
        }
    finally:
        if inproc:
            from actors.system import stop_actor_system

            stop_actor_system(system)
        else:
            system.shutdown()


def _run_child(base: str) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", base]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False, cwd=ROOT)
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    raise RuntimeError(f"{base}: no result\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--one", help="measure one base in this process and print RESULT json")
    args = parser.parse_args()
    if args.one:
        # Actors log to stdout/stderr: keep both off the result line and out of the terminal.
        devnull = os.open(os.devnull, os.O_WRONLY)
        saved = os.dup(1), os.dup(2)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        failure = ""
        try:
            result = _measure_one(args.one)
        except Exception:
            failure = traceback.format_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
        if failure:
            sys.exit(failure)
        print("RESULT " + json.dumps(result), flush=True)
        return
    rows = [_run_child(base) for base in BASES]
    header = (
        f"{'base':<32} {'procs':>5} {'PSS sys MB':>10} {'+starter':>9} {'RTT p50 ms':>10} "
        f"{'p95 ms':>7} {'watch':>5} {'ready ms':>8} {'8 actors ms':>11} {'log ev ms':>9}"
    )
    print(f"Thespian bases, {ACTORS} trivial actors idle, {ROUND_TRIPS} actor-to-actor round trips")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['base']:<32} {r['processes']:>5} {r['pss_system_mb']:>10.1f} "
            f"{r['pss_with_starter_mb']:>9.1f} {r['rtt_p50_ms']:>10.3f} {r['rtt_p95_ms']:>7.3f} "
            f"{'yes' if r['watch'] else 'no':>5} {r['ready_ms']:>8.0f} "
            f"{r['eight_actors_ms']:>11.0f} {r['log_event_ms']:>9.3f}"
        )
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")


if __name__ == "__main__":
    main()
