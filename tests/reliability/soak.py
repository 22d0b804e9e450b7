"""The soak: many turns through the real ``shelldon run`` (Telegram fake + scripted brain), a
mix of FREE calls, parked approvals decided, and tool proposals gated and decided, while the
service tree's PSS, descriptors, processes and per-turn latency are sampled.

Used by ``tests/bench/bench_soak.py`` (2 000 turns) and by the suite's short version.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import proctree
from tests.fakes.fake_telegram import Sent
from tests.integration.runtime.harness import ThreadedFakeTelegram

from .rig import ShelldonRun, fd_count, wait_until

# The outbox spaces messages to one chat 0.5 s apart (Telegram's per-chat limit); turns from
# ten owners in turn keep that pacing out of the latency being measured.
OWNERS = tuple(range(1001, 1011))
PROPOSE_EVERY = 50  # a gate run (sandboxed pytest) costs ~1 s: keep them a small share
TOOL_CODE = """\
DESCRIPTION = "Say how long a text is."
PARAMS_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def run(text):
    return str(len(text))
"""
TOOL_TEST = """\
from {name} import run


def test_length():
    assert run("abc") == "3"
"""


def kind_of(i: int) -> str:
    """What turn ``i`` of the soak does."""
    if i % PROPOSE_EVERY == PROPOSE_EVERY - 1:
        return "propose"
    return {7: "risky", 9: "chat"}.get(i % 10, "free")


def script(turns: int) -> list[dict[str, Any]]:
    """Every model answer the soak needs, in turn order (``<kN>`` keys each turn's steps)."""
    steps: list[dict[str, Any]] = []
    for i in range(turns):
        key, kind = f"<k{i}>", kind_of(i)
        if kind == "free":
            calls = [
                {"name": "get_time", "args": {}},
                {"name": "python_eval", "args": {"code": f"{i} * 2"}},
            ]
            steps.append({"when": key, "tool_calls": calls})
        elif kind == "risky":
            args = {"path": f"soak/n{i % 5}.txt", "content": f"turn {i}"}
            steps.append({"when": key, "tool_calls": [{"name": "write_file", "args": args}]})
        elif kind == "propose":
            name = f"soak_len_{i}"  # each its own: only the first is promoted
            args = {"name": name, "code": TOOL_CODE, "test": TOOL_TEST.format(name=name)}
            steps.append({"when": key, "tool_calls": [{"name": "propose_tool", "args": args}]})
        steps.append({"when": key, "text": f"done {key}"})
    return steps


@dataclass
class Sample:
    """The service tree at one moment, idle between turns."""

    turn: int
    pss_kib: int
    fds: int
    processes: int


@dataclass
class SoakReport:
    """What a soak measured: idle samples and per-turn latency (seconds) by turn index."""

    turns: int
    seconds: float
    samples: list[Sample] = field(default_factory=list)
    latency: dict[int, float] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)

    def segment(self, start: int, stop: int, kind: str = "free") -> list[float]:
        """Latencies of turns ``start <= i < stop`` of ``kind``."""
        return [s for i, s in self.latency.items() if start <= i < stop and kind_of(i) == kind]

    def sample_at(self, turn: int) -> Sample:
        """The sample taken at (or first after) ``turn``."""
        return next(s for s in self.samples if s.turn >= turn)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest-rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def p50_p95(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), percentile(values, 0.95)


class _Chat:
    """Reads the owner's chat incrementally (the fake's sent list only grows)."""

    def __init__(self, tg: ThreadedFakeTelegram) -> None:
        self.tg, self.seen = tg, 0

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            sent = self.tg.fake.sent
            while self.seen < len(sent):
                message = sent[self.seen]
                self.seen += 1
                if predicate(message):
                    return message
            if time.monotonic() > deadline:
                raise AssertionError(f"soak: timed out waiting for {what}")
            time.sleep(0.0005)

    def wait_text(self, text: str, timeout: float, what: str) -> Sent:
        """The next message showing exactly ``text``."""
        return self.wait_for(lambda m: m.visible == text, timeout, what)  # type: ignore[no-any-return]

    def wait_keyboard(self, timeout: float, what: str) -> Sent:
        """The next message with approval buttons."""
        return self.wait_for(lambda m: bool(m.buttons()), timeout, what)  # type: ignore[no-any-return]


def sample(run: ShelldonRun, turn: int) -> Sample:
    # Wait for the last worker to be reaped so every sample sees the idle tree.
    time.sleep(0.05)
    tree = run.tree()
    return Sample(turn, proctree.pss_kib(tree), fd_count(tree), len(tree))


def run_soak(
    home: Path,
    turns: int,
    sample_every: int,
    progress: Callable[[str], None] | None = None,
) -> SoakReport:
    """Drive ``turns`` turns through a fresh service on ``home``; sample every ``sample_every``."""
    tg = ThreadedFakeTelegram()
    run = ShelldonRun(
        home,
        tg,
        script(turns),
        SHELLDON_TELEGRAM_ALLOWED_USERS=",".join(map(str, OWNERS)),
    )
    report = SoakReport(turns, 0.0)
    try:
        run.start()
        chat = _Chat(tg)
        started = time.monotonic()
        promoted = False
        for i in range(turns):
            kind = kind_of(i)
            report.kinds[kind] = report.kinds.get(kind, 0) + 1
            key, owner = f"<k{i}>", OWNERS[i % len(OWNERS)]
            before = time.perf_counter()
            tg.do(tg.fake.queue_message, owner, f"turn {key} please")
            if kind == "risky":
                ask = chat.wait_keyboard(20, f"turn {i}'s keyboard")
                report.latency[i] = time.perf_counter() - before
                tg.do(tg.fake.tap, owner, ask, 0 if i % 20 == 7 else 1)  # approve or deny
                chat.wait_text(f"done {key}", 20, f"turn {i}'s end")
            elif kind == "propose":
                chat.wait_text(f"done {key}", 20, f"turn {i}'s reply")
                report.latency[i] = time.perf_counter() - before
                ask = chat.wait_keyboard(60, f"turn {i}'s promotion")
                tg.do(tg.fake.tap, owner, ask, 1 if promoted else 0)
                promoted = True
                wait_until(lambda: not _pending(run), 20, f"turn {i}'s promotion decided")
            else:
                chat.wait_text(f"done {key}", 20, f"turn {i}'s reply")
                report.latency[i] = time.perf_counter() - before
            if (i + 1) % sample_every == 0 or i == 0:
                report.samples.append(sample(run, i + 1))
                if progress is not None:
                    s = report.samples[-1]
                    progress(
                        f"turn {s.turn}: PSS {s.pss_kib / 1024:.1f} MB, {s.fds} fds, "
                        f"{s.processes} processes"
                    )
        report.seconds = time.monotonic() - started
        return report
    finally:
        run.stop()
        tg.close()


def _pending(run: ShelldonRun) -> list[Any]:
    from shelldon.store import Store

    with Store(run.home / "shelldon.db") as store:
        return store.parked.pending()


def dump(report: SoakReport, path: Path) -> None:
    """Write the report as JSON (for a plot of the memory curve)."""
    path.write_text(
        json.dumps(
            {
                "turns": report.turns,
                "seconds": report.seconds,
                "samples": [s.__dict__ for s in report.samples],
            },
            indent=1,
        )
    )
