"""Telegram transport figures on loopback: rendering, update → handoff, send round trip.

Run: .venv/bin/python tests/bench/bench_telegram.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shelldon.contracts import Decision, InboundMessage
from shelldon.transport.approvals import callback_key
from shelldon.transport.poller import Poller
from shelldon.transport.render import pre, split_message
from shelldon.transport.telegram import BotApi
from shelldon.transport.updates import UpdateRules
from tests.fakes.fake_telegram import FakeTelegram
from tests.integration.transport.support import SqliteLedger

ROUNDS = 200
OWNER = 7


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    return f"p50 {statistics.median(ordered) * 1000:.2f} ms / p95 {p95 * 1000:.2f} ms"


def bench_split() -> None:
    reply = "\n".join(f"{i:05d} <tag> & " + "y" * 60 for i in range(140))
    html = pre(reply)
    samples = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        chunks = split_message(html)
        samples.append(time.perf_counter() - start)
    print(f"split_message, {len(reply)} chars into {len(chunks)} chunks: {_ms(samples)}")


async def bench_loopback() -> None:
    with tempfile.TemporaryDirectory() as folder:
        ledger = SqliteLedger(Path(folder) / "ledger.db")
        handed: list[float] = []

        async def handoff(event: InboundMessage | Decision) -> str | None:
            handed.append(time.perf_counter())
            return None

        async with FakeTelegram() as tg, BotApi(tg.token, api_base=tg.api_base) as api:
            poller = Poller(
                api, UpdateRules.of([OWNER], callback_key(tg.token)), ledger, handoff,
                poll_timeout_s=0,
            )  # fmt: skip
            await poller.poll_once()  # warm the connection
            samples = []
            for i in range(ROUNDS):
                tg.queue_message(OWNER, f"hello {i}")
                start = time.perf_counter()
                await poller.poll_once()
                samples.append(handed[-1] - start)
            print(f"update → durable handoff (getUpdates + parse + ledger): {_ms(samples)}")
            samples = []
            for i in range(ROUNDS):
                start = time.perf_counter()
                await api.send_message(OWNER, pre(f"result <{i}> & done"))
                samples.append(time.perf_counter() - start)
            print(f"sendMessage round trip: {_ms(samples)}")
        ledger.close()


if __name__ == "__main__":
    bench_split()
    asyncio.run(bench_loopback())
