"""What a growing toolbox costs per turn: 0, 10, 100 and 500 live self-coded tools (issue 22).

Run: .venv/bin/python tests/bench/bench_tool_catalogue.py

For each toolbox size, live tools are promoted for real (files, approvals in a store, the
manifest core writes) and the worker's registry is built as ``build_registry`` builds it
(built-ins, then discovery). The worker loop (``run_turn``) then plays each turn against the
real providers talking to the fake OpenAI and Anthropic servers on loopback, and the request
bodies the servers received are measured; "job" is the encoded ``Job`` the worker sends its
broker. Printed per size:

- first request of a trivial turn (one model call, a text answer);
- the whole of a turn that uses one self-coded tool: describe_tools, the call, the answer (three
  requests), and a turn that calls it without describing it first (two requests);
- worker discovery, cold (no inherited result) p50/p95;
- turn overhead in the worker, p50: on the turn's path (the zygote's toolbox fingerprint
  check, the loop of a trivial turn, its Job encoded for the channel), and the spare's
  preparation before the turn arrives (warm discovery, the registry);
- "before": the first OpenAI request as it was with every tool offered in full.

Then the whole service's turn (``bench_turn``'s: update in -> reply out, two FREE tool calls,
the scripted brain) with 0 and 100 live tools (``--service-turns 0`` skips it).

Budgets: first request <= 8 KB at 100 tools and <= 16 KB at 500; discovery <= 15 ms at 500;
the service's turn at 100 tools within 10 % of the 0-tool figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shelldon.broker.anthropic_provider import AnthropicProvider  # noqa: E402
from shelldon.broker.openai_provider import OpenAIProvider  # noqa: E402
from shelldon.config import load_settings  # noqa: E402
from shelldon.contracts import Completion, Job, ToolCall, TurnRequest, Usage  # noqa: E402
from shelldon.contracts.codec import encode  # noqa: E402
from shelldon.store import Store  # noqa: E402
from shelldon.toolbox.manifest import code_hash  # noqa: E402
from shelldon.toolbox.toolbox import Toolbox  # noqa: E402
from shelldon.worker.loop import PROPOSE_TOOL, run_turn  # noqa: E402
from shelldon.worker.prompt import build_messages  # noqa: E402
from shelldon.worker.tools import clock, files, git, http, pyeval, selfcoded, shell, write  # noqa: E402
from shelldon.worker.tools.registry import Registry, ToolContext  # noqa: E402
from tests.bench.bench_discovery import TOOL  # noqa: E402 - the same live tool, many times
from tests.fakes.fake_anthropic import FakeAnthropic  # noqa: E402
from tests.fakes.fake_openai import FakeOpenAI  # noqa: E402

SIZES = (0, 10, 100, 500)
FIRST_BUDGET = {100: 8 * 1024, 500: 16 * 1024}
DISCOVERY_BUDGET_MS = 15.0
OVERHEAD_SLACK = 0.10
FAR = 1e12


Answer = tuple[str, Any]  # ("text", reply) or ("tools", [(name, args), ...])


MEMORY = selfcoded.Discovery()
"""The zygote's discovery, as every worker it forks is handed it."""


def registry_for(ctx: ToolContext) -> Registry:
    """As ``build_registry`` builds it in a worker: the built-in families, then the live
    self-coded tools (the zygote's discovery: reused while the toolbox is unchanged)."""
    registry = Registry(ctx)
    for family in (clock, files, pyeval, write, shell, http, git):
        registry.add_all(family.specs())
    registry.add_all(selfcoded.discover(ctx, MEMORY))
    return registry


def completion(answer: Answer) -> Completion:
    kind, value = answer
    if kind == "text":
        return Completion(text=value, usage=Usage(1, 1))
    tool_calls = tuple(ToolCall(f"c{i}", name, args) for i, (name, args) in enumerate(value))
    return Completion(text="", tool_calls=tool_calls, usage=Usage(1, 1))


def request_sizes(ctx: ToolContext, script: list[Answer], via: str) -> list[int]:
    """Bytes of each model request of one turn playing ``script``, as ``via`` receives it."""
    settings = load_settings(environ={"SHELLDON_HOME": str(ctx.workspace.parent)})
    sizes: list[int] = []
    if via == "job":
        answers = [completion(a) for a in script]

        def ask(job: Job) -> Completion:
            sizes.append(len(encode(job)))
            return answers.pop(0)

        run_turn(TurnRequest("t", 1, "hello"), registry_for(ctx), ask, settings, FAR)
        return sizes
    fake: Any = FakeOpenAI().start() if via == "openai" else FakeAnthropic().start()
    provider: Any
    if via == "openai":
        provider = OpenAIProvider(
            api_key=fake.api_key, model="m", max_tokens=256, base_url=fake.base_url
        )
    else:
        provider = AnthropicProvider(
            api_key=fake.api_key, model="m", max_tokens=256, base_url=fake.base_url
        )
    for kind, value in script:
        if kind == "text":
            fake.reply_text(value)
        else:
            fake.reply_tool_calls(*value)
    loop = asyncio.new_event_loop()
    try:

        def ask_real(job: Job) -> Completion:
            deadline = time.monotonic() + 30
            answer: Completion = loop.run_until_complete(
                provider.complete_with_tools(job.messages, job.tools, deadline=deadline)
            )
            return answer

        run_turn(TurnRequest("t", 1, "hello"), registry_for(ctx), ask_real, settings, FAR)
        return [len(r.body) for r in fake.requests]
    finally:
        loop.run_until_complete(provider.aclose())
        loop.close()
        fake.stop()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def discovery_ms(ctx: ToolContext) -> tuple[float, float]:
    """Cold discovery: a worker whose parent never discovered (the previous result freed)."""
    out = []
    for _ in range(200):
        t = time.perf_counter()
        selfcoded.discover(ctx)  # a fresh Discovery each time: nothing remembered
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out), percentile(out, 0.95)


def overhead_ms(ctx: ToolContext) -> tuple[float, float]:
    """A trivial turn's cost in the worker, p50: on the turn's path, the zygote's toolbox
    fingerprint check, the loop and the Job encoded for the channel; and the spare's
    preparation before the turn arrives (warm discovery and the registry)."""
    settings = load_settings(environ={"SHELLDON_HOME": str(ctx.workspace.parent)})
    reply = Completion(text="hi", usage=Usage(1, 1))
    selfcoded.discover(ctx, MEMORY)
    registry = registry_for(ctx)

    def ask(job: Job) -> Completion:
        encode(job)
        return reply

    def one() -> None:
        selfcoded.toolbox_fingerprint(ctx)
        run_turn(TurnRequest("t", 1, "hello"), registry, ask, settings, FAR)

    timed(one, 50)
    turn = statistics.median(timed(one, 1000))
    prep = statistics.median(timed(lambda: registry_for(ctx), 300))
    return turn, prep


def before_first_request(ctx: ToolContext) -> int:
    """The first OpenAI request as it was before the catalogue: every tool offered in full."""
    settings = load_settings(environ={"SHELLDON_HOME": str(ctx.workspace.parent)})
    registry = registry_for(ctx)
    every = (*registry.definitions(), PROPOSE_TOOL)
    messages = build_messages(TurnRequest("t", 1, "hello"), settings, every)
    provider = OpenAIProvider(api_key="k", model="m", max_tokens=256)
    return len(json.dumps(provider.build_request(messages, every)).encode())


def promote_tools(sc: Toolbox, store: Store, n: int) -> None:
    """``n`` live tools as core holds them: files, the owner's approvals, the manifest."""
    for i in range(n):
        code = TOOL.format(i=i)
        (sc.live_dir / f"tool_{i:03d}.py").write_text(code)
        store.tools.approve(f"tool_{i:03d}", code_hash(code), 0.0)
    sc.write_manifest()


def service_turn_ms(n: int, turns: int, gap_s: float) -> float:
    """Update in -> reply out through the real service (``bench_turn``'s turn: two FREE
    get_time calls, three model calls, the scripted brain) with ``n`` live tools, p50."""
    from tests.bench.bench_turn import REPLY, RunningService, brain
    from tests.integration.runtime.harness import ThreadedFakeTelegram

    script, _, _ = brain("scripted", turns + 5)
    tg = ThreadedFakeTelegram()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "vault").mkdir(parents=True)
        (home / "vault" / "telegram_token").write_text(tg.fake.token)
        (home / "script.json").write_text(json.dumps(script))
        settings = load_settings(environ={"SHELLDON_HOME": str(home)})
        with Store(settings.database) as store:
            promote_tools(Toolbox.from_settings(settings, store), store, n)
        svc = RunningService(home, tg, {"SHELLDON_BRAIN_SCRIPT": "script.json"})
        try:
            tg.wait(lambda: tg.fake.commands, timeout=30)
            times = []
            for i in range(turns + 5):
                time.sleep(gap_s)
                before = len(tg.fake.sent)
                started = time.perf_counter()
                tg.do(tg.fake.queue_message, 1001, f"what time is it? ({i})")
                deadline = time.monotonic() + 30
                while not any(m.visible == REPLY for m in tg.fake.sent[before:]):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"turn {i} got no reply with {n} tools")
                    time.sleep(0.0002)
                times.append((time.perf_counter() - started) * 1000)
            return statistics.median(times[5:])
        finally:
            svc.stop()
            tg.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--service-turns", type=int, default=40, help="0: skip the service")
    parser.add_argument("--gap", type=float, default=0.6, help="seconds between service turns")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    rows = []
    for n in SIZES:
        with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "shelldon.db") as store:
            sc = Toolbox(Path(tmp) / "toolbox", store)
            promote_tools(sc, store, n)
            # In this unconfined process, not in a worker: the worker's own check is off.
            ctx = ToolContext(
                workspace=Path(tmp) / "workspace",
                vault=Path(tmp) / "vault",
                live_tools=sc.live_dir,
                require_fs_layer=False,
            )
            assert len(selfcoded.discover(ctx)) == n
            row: dict[str, Any] = {"n": n}
            target = f"tool_{n // 2:03d}"
            use = [
                ("tools", [("describe_tools", {"names": [target]})]),
                ("tools", [(target, {"text": "one two three"})]),
                ("text", "Three words."),
            ]
            direct = use[1:]
            for via in ("job", "openai", "anthropic"):
                row[f"first_{via}"] = request_sizes(ctx, [("text", "Hi!")], via)[0]
                if n:
                    row[f"use_{via}"] = sum(request_sizes(ctx, use, via))
                    row[f"direct_{via}"] = sum(request_sizes(ctx, direct, via))
            row["disc50"], row["disc95"] = discovery_ms(ctx)
            row["overhead"], row["prep"] = overhead_ms(ctx)
            row["before"] = before_first_request(ctx)
            rows.append(row)
    service = {}
    if args.service_turns:
        for n in (0, 100):
            service[n] = service_turn_ms(n, args.service_turns, args.gap)

    def kb(value: int | None) -> str:
        return f"{value / 1024:6.1f}" if value is not None else "     -"

    print("bytes per request body (KB): job = encoded Job; openai / anthropic = body received")
    print("by the fake server from the real provider client")
    print(
        f"{'tools':>5} | {'first request':^22} | {'turn using one tool':^22} |"
        f" {'same, no describe':^22} | discovery ms  | turn ms | spare ms | before"
    )
    print(
        f"{'':>5} | {'job':>6} {'openai':>7} {'anthr':>7} | {'job':>6} {'openai':>7} {'anthr':>7} |"
        f" {'job':>6} {'openai':>7} {'anthr':>7} | {'p50':>5} {'p95':>6} |"
        "   p50   |   p50    | openai"
    )
    for r in rows:
        print(
            f"{r['n']:>5} | {kb(r['first_job'])} {kb(r['first_openai'])} {kb(r['first_anthropic'])}"
            f"  | {kb(r.get('use_job'))} {kb(r.get('use_openai'))} {kb(r.get('use_anthropic'))}"
            f"  | {kb(r.get('direct_job'))} {kb(r.get('direct_openai'))}"
            f" {kb(r.get('direct_anthropic'))}  | {r['disc50']:5.2f} {r['disc95']:6.2f} |"
            f"  {r['overhead']:6.3f} |  {r['prep']:6.3f}  | {kb(r['before'])}"
        )
    by_n = {r["n"]: r for r in rows}
    verdicts = []
    for n, budget in FIRST_BUDGET.items():
        worst = max(by_n[n][f"first_{via}"] for via in ("job", "openai", "anthropic"))
        verdicts.append((f"first request at {n} tools {worst} B <= {budget} B", worst <= budget))
    disc = by_n[500]["disc95"]
    verdicts.append((f"discovery p95 at 500 tools {disc:.2f} ms <= 15 ms", disc <= 15.0))
    base, hundred = by_n[0]["overhead"], by_n[100]["overhead"]
    print(
        f"worker's own path of a trivial turn: {hundred:.3f} ms at 100 tools, {base:.3f} ms at 0"
        " (not a budget: a fraction of the whole turn below)"
    )
    if service:
        base, hundred = service[0], service[100]
        within = hundred <= base * (1 + OVERHEAD_SLACK)
        verdicts.append(
            (
                f"service turn (update in -> reply out) p50 at 100 tools {hundred:.1f} ms vs "
                f"{base:.1f} ms at 0 (+10 % allowed)",
                within,
            )
        )
    for text, ok in verdicts:
        print(f"  {'ok  ' if ok else 'OVER'} {text}")
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("PASS" if all(ok for _, ok in verdicts) else "OVER BUDGET")


if __name__ == "__main__":
    main()
