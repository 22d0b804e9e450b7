"""Per-turn discovery cost with 500 live self-coded tools (budget: <= 15 ms).

Run: .venv/bin/python tests/bench/bench_discovery.py
Prints p50/p95 of ``discover`` (manifest read + specs), the first call of one tool (its lazy
import, which reads and hashes its bytes), a promotion's manifest rewrite (from the approvals in
the store: each live file read and hashed), and the start-up rewrite from scratch.
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from shelldon.contracts import ToolCall  # noqa: E402
from shelldon.store import Store  # noqa: E402
from shelldon.toolbox.manifest import code_hash  # noqa: E402
from shelldon.toolbox.toolbox import Toolbox  # noqa: E402
from shelldon.worker.tools import selfcoded  # noqa: E402
from shelldon.worker.tools.registry import Registry, ToolContext, execute_tool  # noqa: E402
from shelldon.worker.tools.selfcoded import discover  # noqa: E402

N_TOOLS = 500
BUDGET_MS = 15.0

TOOL = '''\
"""Tool number {i}: a small text utility of the kind the pet writes for itself."""
import re

DESCRIPTION = "Count the words in a text and report tool {i}'s answer; ignores punctuation."
PARAMS_SCHEMA = {{
    "type": "object",
    "properties": {{
        "text": {{"type": "string", "description": "the text to count"}},
        "min_len": {{"type": "integer", "description": "shortest word to count"}},
    }},
    "required": ["text"],
}}


def run(text, min_len=1):
    words = [w for w in re.findall(r"[A-Za-z']+", text) if len(w) >= min_len]
    return f"{{len(words)}} words"
'''


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(fn, repeat: int, clock=time.perf_counter) -> list[float]:
    out = []
    for _ in range(repeat):
        t = clock()
        fn()
        out.append((clock() - t) * 1000)
    return out


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "shelldon.db") as store:
        workspace = Path(tmp) / "workspace"
        sc = Toolbox(Path(tmp) / "toolbox", store)
        for i in range(N_TOOLS):
            code = TOOL.format(i=i)
            (sc.live_dir / f"tool_{i:03d}.py").write_text(code)
            store.tools.approve(f"tool_{i:03d}", code_hash(code), 0.0)
        t = time.perf_counter()
        sc.write_manifest()
        cold_ms = (time.perf_counter() - t) * 1000
        # In this unconfined process, not in a worker: the worker's own check is off.
        ctx = ToolContext(
            workspace=workspace,
            vault=Path(tmp) / "vault",
            live_tools=sc.live_dir,
            require_fs_layer=False,
        )
        specs = discover(ctx)
        assert len(specs) == N_TOOLS, len(specs)

        def cold(clock) -> list[float]:
            # A worker whose parent never discovered: parse the manifest, build every spec.
            # The previous result is freed outside the timed region (a fresh worker has none).
            out = []
            for _ in range(300):
                t = clock()
                discover(ctx)  # a fresh Discovery each time: nothing remembered
                out.append((clock() - t) * 1000)
            return out

        turns = cold(time.perf_counter)
        p50, p95 = statistics.median(turns), percentile(turns, 0.95)
        cpu = cold(time.process_time)
        cpu50, cpu95 = statistics.median(cpu), percentile(cpu, 0.95)
        memory = selfcoded.Discovery()
        discover(ctx, memory)
        # A worker forked after the zygote discovered: compare bytes and names, reuse.
        warm = timed(lambda: discover(ctx, memory), 300)
        warm50, warm95 = statistics.median(warm), percentile(warm, 0.95)
        size_kb = (sc.live_dir / "manifest.json").stat().st_size / 1024

        registry = Registry(ctx)
        registry.add_all(specs)
        call = ToolCall("c1", "tool_250", {"text": "one two three"})
        first = timed(lambda: execute_tool(registry, call), 1)[0]
        warm = statistics.median(timed(lambda: execute_tool(registry, call), 50))

        one_more = TOOL.format(i=500)
        t = time.perf_counter()
        sc.promote("one_more", one_more, expected_hash=code_hash(one_more))
        promote_ms = (time.perf_counter() - t) * 1000

    print(f"discovery, {N_TOOLS} live tools, manifest {size_kb:.0f} KB, 300 turns:")
    print("  worker with no inherited result (parse manifest + build 500 specs):")
    print(f"    wall  p50 {p50:6.2f} ms   p95 {p95:6.2f} ms   budget {BUDGET_MS:.0f} ms")
    print(f"    CPU   p50 {cpu50:6.2f} ms   p95 {cpu95:6.2f} ms")
    print("  worker forked after the parent discovered (unchanged toolbox):")
    print(f"    wall  p50 {warm50:6.2f} ms   p95 {warm95:6.2f} ms")
    print(f"  first call of one tool (lazy import)   {first:6.2f} ms; warm call {warm:.3f} ms")
    print(f"  promote with {N_TOOLS} live (each file hashed, new ones parsed) {promote_ms:6.2f} ms")
    print(f"  manifest from scratch (hash + AST of {N_TOOLS} modules)        {cold_ms:6.2f} ms")
    print(f"  load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("PASS" if p95 <= BUDGET_MS else "OVER BUDGET")


if __name__ == "__main__":
    main()
