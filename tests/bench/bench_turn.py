"""Turn overhead, memory and cold start of the whole service (the design's budgets).

    .venv/bin/python tests/bench/bench_turn.py [--provider scripted|openai|anthropic] [--turns N]
        [--fallback openai|anthropic [--main-down]]

Runs the real service (`shelldon run`: every actor in one process, the zygote and its forked
workers, sqlite) with the Telegram transport against the fake Bot API, and a zero-latency
brain: the scripted provider, or the fake OpenAI / Anthropic server on loopback driven by the
real client. Each turn makes two FREE tool calls (two rounds of get_time, three model calls).
Prints, for update in → reply out: p50/p95 latency (timed turns, nothing else sampling the
service); PSS of every process of the service idle, and at its peak during further turns
sampled every 5 ms (summed from /proc/PID/smaps_rollup: reading smaps of every process 200
times a second slows the service, so those turns are not timed); and cold start of
`shelldon run` to polling. ``--fallback`` configures a ``[brain.fallback]`` on a second fake
(idle: never asked); ``--main-down`` makes the main answer every turn's first call with a 529,
so the fallback answers every turn.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import proctree  # noqa: E402
from tests.integration.runtime.harness import (  # noqa: E402
    ThreadedFakeTelegram,
    service_processes,
)

OWNER = 1001
REPLY = "Two clocks checked."
PEAK_TURNS = 10


def fake_of(provider: str) -> Any:
    """A started fake LLM speaking ``provider``'s wire format."""
    if provider == "openai":
        from tests.fakes.fake_openai import FakeOpenAI

        return FakeOpenAI().start()
    from tests.fakes.fake_anthropic import FakeAnthropic

    return FakeAnthropic().start()


def queue_turns(fake: Any, turns: int) -> None:
    for _ in range(turns):
        fake.reply_tool_calls(("get_time", {}))
        fake.reply_tool_calls(("get_time", {}))
        fake.reply_text(REPLY)


def with_fallback(
    provider: str, main: Any, turns: int, main_down: bool, vault: Path
) -> tuple[dict[str, str], Any]:
    """A second fake as ``[brain.fallback]`` (its key under a name of its own), and env; with
    ``main_down`` the main's queue is replaced by one 529 per turn and the fallback answers."""
    from tests.fakes.canned_server import Canned

    spare = fake_of(provider)
    (vault / "spare_api_key").write_text(spare.api_key)
    if main_down:
        main._queue.clear()
        for _ in range(turns):
            main.push(Canned(529, {"error": "overloaded"}, headers={"retry-after": "120"}))
        queue_turns(spare, turns)
    env = {
        "SHELLDON_BRAIN_FALLBACK_PROVIDER": provider,
        "SHELLDON_BRAIN_FALLBACK_MODEL": "spare-model",
        "SHELLDON_BRAIN_FALLBACK_BASE_URL": spare.base_url,
        "SHELLDON_BRAIN_FALLBACK_KEY": "spare_api_key",
    }
    return env, spare


def brain(provider: str, turns: int) -> tuple[list[dict[str, Any]], dict[str, str], Any]:
    """The script (scripted) or a started fake LLM with every answer queued, and env."""
    if provider == "scripted":
        step = [
            {"tool_calls": [{"name": "get_time", "args": {}}]},
            {"tool_calls": [{"name": "get_time", "args": {}}]},
            {"text": REPLY},
        ]
        return step * turns, {}, None
    fake = fake_of(provider)
    queue_turns(fake, turns)
    env = {"SHELLDON_BRAIN_PROVIDER": provider, "SHELLDON_BRAIN_BASE_URL": fake.base_url}
    return [], env, fake


class RunningService:
    """`shelldon run` as the owner would start it, with its whole process tree."""

    def __init__(self, home: Path, tg: ThreadedFakeTelegram, env: dict[str, str]) -> None:
        full_env = {
            **os.environ,
            "SHELLDON_HOME": str(home),
            "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
            "SHELLDON_TELEGRAM_ALLOWED_USERS": str(OWNER),
            **env,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "shelldon", "run"],
            env=full_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def pids(self) -> set[int]:
        return service_processes(self.proc.pid)

    def pss_mb(self) -> float:
        return proctree.pss_kib(self.pids()) / 1024

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def bench(
    provider: str,
    turns: int,
    warmup: int,
    gap_s: float,
    fallback: str = "",
    main_down: bool = False,
) -> None:
    script, env, fake = brain(provider, turns + warmup + PEAK_TURNS)
    tg = ThreadedFakeTelegram()
    spare = None
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "vault").mkdir(parents=True)
        (home / "vault" / "telegram_token").write_text(tg.fake.token)
        if fake is not None:
            (home / "vault" / f"{provider}_api_key").write_text(fake.api_key)
            if fallback:
                total = turns + warmup + PEAK_TURNS
                extra, spare = with_fallback(fallback, fake, total, main_down, home / "vault")
                env = {**env, **extra}
        else:
            (home / "script.json").write_text(json.dumps(script))
            env = {"SHELLDON_BRAIN_SCRIPT": "script.json"}
        svc = RunningService(home, tg, env)
        try:
            tg.wait(lambda: tg.fake.commands, timeout=30)

            def one_turn(i: int) -> float:
                # Owners do not type twice a second: keep the outbox's per-chat pacing out of it.
                time.sleep(gap_s)
                before = len(tg.fake.sent)
                started = time.perf_counter()
                tg.do(tg.fake.queue_message, OWNER, f"what time is it? ({i})")
                deadline = time.monotonic() + 30
                while not any(m.visible.startswith(REPLY) for m in tg.fake.sent[before:]):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"turn {i} got no reply: {tg.fake.sent[before:]}")
                    time.sleep(0.0002)
                return (time.perf_counter() - started) * 1000

            for i in range(warmup):
                one_turn(i)
            time.sleep(1.0)
            idle = svc.pss_mb()
            processes = len(svc.pids())
            times = [one_turn(warmup + i) for i in range(turns)]
            peak = [idle]
            sampling = threading.Event()

            def sample() -> None:
                while not sampling.is_set():
                    peak[0] = max(peak[0], svc.pss_mb())
                    time.sleep(0.005)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            for i in range(PEAK_TURNS):
                one_turn(warmup + turns + i)
            sampling.set()
            sampler.join()
            q = statistics.quantiles(times, n=20)
            down = " (main down: the fallback answers)" if main_down else ""
            print(
                f"provider={provider} fallback={fallback or 'none'}{down} turns={turns} "
                f"processes idle={processes}"
            )
            print(
                f"  update in -> reply out: p50 {statistics.median(times):.1f} ms, "
                f"p95 {q[18]:.1f} ms, max {max(times):.1f} ms"
            )
            print(f"  PSS of the service: idle {idle:.1f} MB, peak during turns {peak[0]:.1f} MB")
        finally:
            svc.stop()
            tg.close()
            for server in (fake, spare):
                if server is not None:
                    server.stop()


def cold_start(runs: int) -> None:
    """`shelldon run` from exec to the transport polling (setMyCommands seen by the fake)."""
    figures = []
    for _ in range(runs):
        tg = ThreadedFakeTelegram()
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            (home / "vault").mkdir()
            (home / "vault" / "telegram_token").write_text(tg.fake.token)
            env = {
                **os.environ,
                "SHELLDON_HOME": str(home),
                "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
                "SHELLDON_TELEGRAM_ALLOWED_USERS": str(OWNER),
            }
            started = time.perf_counter()
            proc = subprocess.Popen(
                [sys.executable, "-m", "shelldon", "run"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                tg.wait(lambda tg=tg: tg.fake.commands, timeout=30)
                figures.append((time.perf_counter() - started) * 1000)
            finally:
                proc.terminate()
                proc.wait(10)
                tg.close()
    print(
        f"cold start to ready (`shelldon run` exec -> polling): "
        f"median {statistics.median(figures):.0f} ms over {runs} runs "
        f"(min {min(figures):.0f}, max {max(figures):.0f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--provider", choices=["scripted", "openai", "anthropic", "all"], default="all"
    )
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--cold-starts", type=int, default=5)
    parser.add_argument("--gap", type=float, default=0.6, help="seconds between turns")
    parser.add_argument("--fallback", choices=["openai", "anthropic"], default="")
    parser.add_argument("--main-down", action="store_true")
    args = parser.parse_args()
    providers = ["scripted", "openai", "anthropic"] if args.provider == "all" else [args.provider]
    for provider in providers:
        bench(provider, args.turns, args.warmup, args.gap, args.fallback, args.main_down)
    if args.cold_starts:
        cold_start(args.cold_starts)


if __name__ == "__main__":
    main()
