"""The soak, short: 150 turns through the real service (FREE calls, approvals decided, three
proposals gated and decided). Descriptors and processes stay flat, memory stays bounded and
latency stable; the full 2 000-turn run with the issue's 5 MB line is
``tests/bench/bench_soak.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from .soak import p50_p95, run_soak

pytestmark = pytest.mark.slow

TURNS, EVERY = 150, 10
WARM = 60  # after the first gate run and promotion (turn 50), which load code once
# Measured: +3.1 MB from turn 60 to 150 (sqlite page caches still filling towards their
# bound; the 2 000-turn bench is flat after turn ~200: +4.2 MB from 200 to 2 000). The bound
# here catches a leak of ~70 KB a turn or more; the bench holds the fine line.
PSS_GROWTH_KIB = 6 * 1024


def test_a_short_soak_leaks_no_memory_descriptors_or_processes(tmp_path: Path) -> None:
    report = run_soak(tmp_path / "home", TURNS, EVERY)
    warm, end = report.sample_at(WARM), report.samples[-1]
    assert end.turn == TURNS
    assert report.kinds == {"free": 120, "risky": 15, "chat": 12, "propose": 3}
    assert end.processes == warm.processes, report.samples
    assert end.fds <= warm.fds + 2, report.samples  # a keep-alive socket may come and go
    assert end.pss_kib - warm.pss_kib <= PSS_GROWTH_KIB, report.samples
    _, early_p95 = p50_p95(report.segment(WARM, 105))
    _, late_p95 = p50_p95(report.segment(105, TURNS))
    # Loose on purpose: the suite shares two cores with other tests.
    assert late_p95 <= early_p95 * 2 + 0.050, (early_p95, late_p95)
