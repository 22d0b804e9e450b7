"""The soak: N turns (default 2 000) through the real `shelldon run` with the fake Bot API and
the scripted brain — FREE calls, parked approvals decided, tool proposals gated and decided.

    .venv/bin/python tests/bench/bench_soak.py [--turns 2000] [--every 100] [--json FILE]

Prints the memory curve (PSS of every process of the service, from /proc/PID/smaps_rollup,
sampled idle every --every turns), descriptors and processes, turns per second, and p50/p95 of
FREE-turn latency (update in -> reply out) per segment. Checks the issue's line: PSS may grow
at most 5 MB from turn 200 to the end; descriptors and processes may not grow; the last
segment's p95 within 1.5x the first's (+10 ms).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.reliability.soak import dump, p50_p95, run_soak  # noqa: E402

WARM_TURN = 200
PSS_GROWTH_MB = 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shelldon-soak-") as tmp:
        report = run_soak(Path(tmp) / "home", args.turns, args.every, progress=print)
    if args.json is not None:
        dump(report, args.json)
    warm_turn = min(WARM_TURN, args.turns // 10 or 1)
    start, end = report.sample_at(warm_turn), report.samples[-1]
    middle = report.sample_at(args.turns // 2)
    mb = 1024.0
    rate = report.turns / report.seconds
    print(f"\n{report.turns} turns in {report.seconds:.1f} s: {rate:.1f} turns/s")
    print(f"mix: {report.kinds}")
    print(
        f"PSS of the service tree: first {report.samples[0].pss_kib / mb:.1f} MB, "
        f"turn {start.turn} {start.pss_kib / mb:.1f} MB, turn {middle.turn} "
        f"{middle.pss_kib / mb:.1f} MB, turn {end.turn} {end.pss_kib / mb:.1f} MB "
        f"(growth {start.turn}->{end.turn}: {(end.pss_kib - start.pss_kib) / mb:+.1f} MB)"
    )
    print(f"descriptors {start.fds} -> {end.fds}, processes {start.processes} -> {end.processes}")
    segments = 4
    size = max(1, (args.turns - warm_turn) // segments)
    p95s = []
    for k in range(segments):
        lo, hi = warm_turn + k * size, warm_turn + (k + 1) * size
        values = report.segment(lo, hi)
        if values:
            p50, p95 = p50_p95(values)
            p95s.append(p95)
            print(
                f"FREE turns {lo}-{hi}: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms "
                f"(n={len(values)})"
            )
    verdicts = {
        f"PSS growth <= {PSS_GROWTH_MB} MB": (end.pss_kib - start.pss_kib) / mb <= PSS_GROWTH_MB,
        "no descriptor growth": end.fds <= start.fds + 2,
        "no process growth": end.processes == start.processes,
        "p95 stable": not p95s or p95s[-1] <= p95s[0] * 1.5 + 0.010,
    }
    for name, ok in verdicts.items():
        print(f"{'PASS' if ok else 'FAIL'}: {name}")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
