"""The figures the README reports for the VM (x86_64, and arm64 at 512 MB as on the Pi; issue
31), measured on the installed unit: ``systemctl start`` → READY, turn time p50/p95 (update in
→ reply out, two FREE tool calls and three model calls on a zero-latency fake brain, as
``tests/bench/bench_turn.py`` times it on the dev machine), and PSS of every process of the unit,
idle and at its peak during turns. Each is printed as one ``VM-FIGURE`` line; the memory ones
must stay within the design's budgets for the OpenAI-compatible provider, at 512 MB total too.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

import pytest

from tests.system.rig import CGROUP, START_S, TURN_S, UNIT, Pet, cgroup_pids, journal, sh

DROP_IN = Path("/run/systemd/system/shelldon.service.d/importtime.conf")

STARTS = 3
TURNS = 20
PEAK_TURNS = 5
REPLY = "Two clocks checked."
PSS_IDLE_BUDGET_MB = 70.0  # DESIGN.md's budgets, OpenAI-compatible provider (no SDK loaded)
PSS_PEAK_BUDGET_MB = 100.0


def pss_mb() -> float:
    """``Pss`` summed over every process in the unit's cgroup subtree (RSS double-counts)."""
    total_kib = 0
    for pid in cgroup_pids():
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue  # gone while we looked (a worker ending)
        for line in text.splitlines():
            if line.startswith("Pss:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024


def figure(name: str, value: str) -> None:
    print(f"VM-FIGURE {os.uname().machine} {name}: {value}")


def start_phases(cursor: str) -> str:
    """Seconds from systemd starting the unit to each milestone of the start after ``cursor``:
    the zygote forked (interpreter, imports, home, toolbox), the actors up, READY."""
    stamps: dict[str, float] = {}
    for line in journal("--after-cursor", cursor, "-o", "json"):
        entry = json.loads(line)
        at = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
        text = entry.get("MESSAGE", "")
        if isinstance(text, str) and text.startswith("Starting"):
            stamps.setdefault("start", at)
        elif isinstance(text, str) and text.startswith("Started"):
            stamps.setdefault("READY", at)
        elif isinstance(text, str) and text.startswith("{"):
            event = json.loads(text).get("event")
            if event in ("zygote_started", "service_started", "service_polling"):
                stamps.setdefault(event, at)
    began = stamps.get("start", 0.0)
    return ", ".join(f"{k} +{v - began:.1f}" for k, v in stamps.items() if k != "start")


def cursor() -> str:
    out = sh("journalctl", "-u", UNIT, "-n", "1", "--show-cursor", "-o", "cat").stdout
    return out.rsplit("-- cursor: ", 1)[-1].strip()


def import_profile(top: int = 30) -> list[str]:
    """One start of the unit under ``python -X importtime`` (a runtime drop-in): the imports
    before READY with the largest cumulative time, slowest first."""
    DROP_IN.parent.mkdir(parents=True, exist_ok=True)
    DROP_IN.write_text("[Service]\nEnvironment=PYTHONPROFILEIMPORTTIME=1\n")
    try:
        sh("systemctl", "daemon-reload")
        sh("systemctl", "stop", UNIT, timeout=START_S)
        mark = cursor()
        sh("systemctl", "start", UNIT, timeout=START_S)
        lines = [x for x in journal("--after-cursor", mark) if x.startswith("import time:")]
    finally:
        DROP_IN.unlink(missing_ok=True)
        sh("systemctl", "daemon-reload")
        sh("systemctl", "restart", UNIT, timeout=START_S)
    rows = []
    for line in lines:
        self_us, cumulative_us, name = line.split(":", 1)[1].split("|", 2)
        if self_us.strip().isdigit():  # not the header line
            rows.append((int(cumulative_us), int(self_us), name[1:].rstrip()))
    total = sum(c for c, _s, name in rows if not name.startswith(" "))
    rows.sort(reverse=True)
    return [f"all top-level imports {total / 1e6:.2f} s"] + [
        f"{c / 1e3:7.0f} ms cumulative {s / 1e3:6.0f} ms self  {name}" for c, s, name in rows[:top]
    ]


def timed_turn(pet: Pet, i: int) -> float:
    """One turn with two FREE get_time calls; seconds from the update queued to the reply."""
    pet.brain.reply_tool_calls(("get_time", {}))
    pet.brain.reply_tool_calls(("get_time", {}))
    pet.brain.reply_text(REPLY)
    time.sleep(0.6)  # owners do not type twice a second: the outbox's pacing stays out of it
    started = time.monotonic()
    mark = pet.bot.say(f"what time is it? ({i})")
    deadline = started + TURN_S
    while not any(t == REPLY for t in pet.bot.texts(mark)):
        if time.monotonic() > deadline:
            raise AssertionError(f"turn {i} got no reply: {pet.bot.texts(mark)!r}")
        time.sleep(0.002)
    return time.monotonic() - started


@pytest.mark.timeout(1200)
def test_start_turn_and_memory_figures_within_budget(pet: Pet) -> None:
    starts, phases = [], []
    for _ in range(STARTS):
        sh("systemctl", "stop", UNIT, timeout=START_S)
        mark = cursor()
        began = time.monotonic()
        sh("systemctl", "start", UNIT, timeout=START_S)  # Type=notify: returns at READY
        starts.append(time.monotonic() - began)
        pet.wait_ready()
        phases.append(start_phases(mark))
    figure("systemctl start -> READY", " ".join(f"{s:.1f}" for s in starts) + " s")
    figure("start phases (s after systemd started it)", " | ".join(phases))
    for row in import_profile():
        figure("import before READY (python -X importtime)", row)
    pet.wait_ready()

    timed_turn(pet, -1)  # warm-up: the first turn after a start pays its imports
    time.sleep(3)  # let the next spare worker settle
    idle = pss_mb()
    processes = len(cgroup_pids())
    times = [timed_turn(pet, i) * 1000 for i in range(TURNS)]
    q = statistics.quantiles(times, n=20)
    figure(
        "turn (2 FREE tool calls, 3 model calls)",
        f"p50 {statistics.median(times):.0f} ms, p95 {q[18]:.0f} ms, max {max(times):.0f} ms",
    )

    peak = [idle]
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            peak[0] = max(peak[0], pss_mb())
            time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        for i in range(PEAK_TURNS):
            timed_turn(pet, TURNS + i)
    finally:
        sampling.set()
        sampler.join(5)
    total = int(Path("/proc/meminfo").read_text().split()[1]) // 1024
    peak_file = CGROUP / "memory.peak"
    unit_peak = peak_file.read_text().strip() if peak_file.exists() else "?"
    figure(
        "PSS of the unit",
        f"idle {idle:.1f} MB ({processes} processes), peak during turns {peak[0]:.1f} MB; "
        f"MemTotal {total} MB; unit memory.peak {unit_peak}",
    )
    assert idle <= PSS_IDLE_BUDGET_MB, idle
    assert peak[0] <= PSS_PEAK_BUDGET_MB, peak[0]
