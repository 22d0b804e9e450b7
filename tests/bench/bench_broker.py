"""Overhead of one ``complete_with_tools`` call against a local fake API, for both providers.

Run: ``.venv/bin/python tests/bench/bench_broker.py [--calls N]``. The fake runs in a child
process (so its work does not share our GIL) and always answers with two tool calls. Each
provider keeps one event loop and one client for all calls, as the BrokerActor does. Printed:
median and p95 of the whole call, of a bare aiohttp POST of the same body to the same fake
(the floor any HTTP client pays), and their difference: the adapter's own overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aiohttp

from shelldon.contracts import Message, Role, ToolCall, ToolDefinition
from tests.fakes.canned_server import Canned, ReceivedRequest
from tests.fakes.fake_anthropic import FakeAnthropic
from tests.fakes.fake_openai import FakeOpenAI

TOOLS = tuple(
    ToolDefinition(f"tool_{i}", f"Tool number {i}.", {"properties": {"path": {"type": "string"}}})
    for i in range(12)
)
TRANSCRIPT = (
    Message(Role.SYSTEM, "You are shelldon, a small pet agent. " * 20),
    Message(Role.USER, "list the workspace and tell me the time"),
    Message(Role.ASSISTANT, "", (ToolCall("call_a", "tool_1", {"path": "."}),)),
    Message(Role.TOOL, "notes.txt\nplans.md\n" * 10, tool_call_id="call_a"),
    Message(Role.USER, "and now?"),
)


class EndlessAnthropic(FakeAnthropic):
    def when_empty(self, request: ReceivedRequest) -> Canned:
        content = [
            {"type": "tool_use", "id": f"toolu_{i}", "name": "tool_1", "input": {"path": "."}}
            for i in range(2)
        ]
        return Canned(200, self.message(content, "tool_use"))


class EndlessOpenAI(FakeOpenAI):
    def when_empty(self, request: ReceivedRequest) -> Canned:
        calls = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": "tool_1", "arguments": '{"path": "."}'},
            }
            for i in range(2)
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        return Canned(200, self.completion(message, "tool_calls"))


def serve(kind: str, conn: Any) -> None:
    fake = EndlessAnthropic() if kind == "anthropic" else EndlessOpenAI()
    fake.start()
    conn.send((fake.port, fake.api_key))
    conn.recv()  # until the parent says stop
    fake.stop()


async def measure(kind: str, port: int, key: str, calls: int) -> tuple[list[float], list[float]]:
    origin = f"http://127.0.0.1:{port}"
    provider: Any
    if kind == "anthropic":
        from shelldon.broker.anthropic_provider import AnthropicProvider, to_anthropic

        provider = AnthropicProvider(api_key=key, model="m", max_tokens=512, base_url=origin)
        system, turns, tools = to_anthropic(TRANSCRIPT, TOOLS)
        raw_body = {"model": "m", "max_tokens": 512, "system": system, "messages": turns}
        raw_body["tools"] = tools
        raw_url = f"{origin}/v1/messages"
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    else:
        from shelldon.broker.openai_provider import OpenAIProvider

        provider = OpenAIProvider(api_key=key, model="m", max_tokens=512, base_url=f"{origin}/v1")
        raw_body = provider.build_request(TRANSCRIPT, TOOLS)
        raw_url = provider.url
        headers = {"Authorization": f"Bearer {key}"}
    full: list[float] = []
    bare: list[float] = []
    async with aiohttp.ClientSession() as session:
        for i in range(calls + 20):
            started = time.perf_counter()
            await provider.complete_with_tools(TRANSCRIPT, TOOLS, deadline=time.monotonic() + 10)
            middle = time.perf_counter()
            async with session.post(raw_url, data=json.dumps(raw_body), headers=headers) as r:
                json.loads(await r.read())
            ended = time.perf_counter()
            if i >= 20:  # warm-up: connection set-up, first-use imports
                full.append((middle - started) * 1000)
                bare.append((ended - middle) * 1000)
    await provider.aclose()
    return full, bare


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    ctx = multiprocessing.get_context("spawn")
    print(f"complete_with_tools against a local fake, {args.calls} calls, 2 tool calls back")
    print(f"{'provider':<10} {'call p50':>9} {'call p95':>9} {'bare p50':>9} {'overhead p50':>13}")
    for kind in ("anthropic", "openai"):
        parent, child = ctx.Pipe()
        server = ctx.Process(target=serve, args=(kind, child), daemon=True)
        server.start()
        port, key = parent.recv()
        try:
            full, bare = asyncio.run(measure(kind, port, key, args.calls))
        finally:
            parent.send("stop")
            server.join(5)
        overhead = statistics.median(a - b for a, b in zip(full, bare, strict=True))
        print(
            f"{kind:<10} {statistics.median(full):>7.2f}ms {p95(full):>7.2f}ms "
            f"{statistics.median(bare):>7.2f}ms {overhead:>11.2f}ms"
        )


if __name__ == "__main__":
    main()
