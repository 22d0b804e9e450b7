"""Memory of photo turns: PSS of the whole service while the owner sends photos.

    .venv/bin/python tests/bench/bench_photo.py [--provider openai|anthropic|all] [--turns N]
        [--cap BYTES]

Runs the real service (`shelldon run`, as `bench_turn.py` does) with the Telegram transport
against the fake Bot API and the fake OpenAI-compatible or Anthropic server on loopback, with
``[photos] vision = "on"``. Each turn is a photo with a caption and, like bench_turn's, two
FREE tool calls (three model calls, each carrying the image: the worst a turn does). Two
weights: a typical Telegram photo (1280x960, ~250 KB) and an image file at the byte cap
(``--cap``, default the 5 MB of ``[photos] max_bytes``: the most one turn may hold). Prints
PSS of every process of the service idle, and its peak while the photo turns run (sampled
every 5 ms from /proc/PID/smaps_rollup), and after them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bench"))

from bench_turn import OWNER, RunningService  # noqa: E402

from tests.fakes.fake_telegram import FakeTelegram  # noqa: E402
from tests.fakes.images import tiny_jpeg  # noqa: E402
from tests.integration.runtime.harness import ThreadedFakeTelegram  # noqa: E402

REPLY = "A grey picture, twice timed."
TYPICAL = ("photo ~250 KB", 250_000, "photo")


def fake_brain(provider: str, turns: int) -> Any:
    if provider == "openai":
        from tests.fakes.fake_openai import FakeOpenAI

        fake: Any = FakeOpenAI().start()
    else:
        from tests.fakes.fake_anthropic import FakeAnthropic

        fake = FakeAnthropic().start()
    for _ in range(turns):
        fake.reply_tool_calls(("get_time", {}))
        fake.reply_tool_calls(("get_time", {}))
        fake.reply_text(REPLY)
    return fake


def send_photo(tg: ThreadedFakeTelegram, n: int, weight: int, kind: str) -> None:
    """Queue one photo (or image file) of about ``weight`` bytes and wait for the reply."""
    data = tiny_jpeg(1280, 960, comment=f"turn {n}".encode(), pad_to=weight)
    file_id = f"f{n}"
    tg.do(tg.fake.serve_file, file_id, data)
    before = len(tg.fake.sent)
    if kind == "photo":
        sizes = FakeTelegram.photo_sizes(file_id, (1280, 960, len(data)))
        tg.do(tg.fake.queue_media, OWNER, "photo", sizes, f"what is this? ({n})")
    else:
        doc = {"file_id": file_id, "mime_type": "image/jpeg", "file_size": len(data)}
        tg.do(tg.fake.queue_media, OWNER, "document", doc, f"and this? ({n})")
    deadline = time.monotonic() + 60
    while not any(m.visible == REPLY for m in tg.fake.sent[before:]):
        if time.monotonic() > deadline:
            raise SystemExit(f"photo turn {n} got no reply: {tg.fake.sent[before:]}")
        time.sleep(0.001)


def bench(provider: str, turns: int, gap_s: float, cap: int) -> None:
    weights = (TYPICAL, (f"image file at a {cap / 1e6:.1f} MB cap", cap - 10_000, "doc"))
    fake = fake_brain(provider, 2 + turns * len(weights))
    tg = ThreadedFakeTelegram()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        (home / "vault").mkdir(parents=True)
        (home / "vault" / "telegram_token").write_text(tg.fake.token)
        (home / "vault" / f"{provider}_api_key").write_text(fake.api_key)
        env = {
            "SHELLDON_BRAIN_PROVIDER": provider,
            "SHELLDON_BRAIN_BASE_URL": fake.base_url,
            "SHELLDON_PHOTOS_VISION": "on",
            "SHELLDON_PHOTOS_MAX_BYTES": str(cap),
        }
        svc = RunningService(home, tg, env)
        try:
            tg.wait(lambda: tg.fake.commands, timeout=30)
            n = 0
            for _ in range(2):  # warm up: the first turns import and allocate once
                send_photo(tg, n, 250_000, "photo")
                n += 1
            time.sleep(1.0)
            idle = svc.pss_mb()
            print(f"provider={provider}: PSS of the service idle {idle:.1f} MB")
            for label, weight, kind in weights:
                peak = [0.0]
                sampling = threading.Event()

                def sample(peak: list[float] = peak, sampling: threading.Event = sampling) -> None:
                    while not sampling.is_set():
                        peak[0] = max(peak[0], svc.pss_mb())
                        time.sleep(0.005)

                sampler = threading.Thread(target=sample, daemon=True)
                sampler.start()
                for _ in range(turns):
                    time.sleep(gap_s)
                    send_photo(tg, n, weight, kind)
                    n += 1
                sampling.set()
                sampler.join()
                time.sleep(1.0)
                print(
                    f"  {turns} turns, {label}: PSS peak {peak[0]:.1f} MB, "
                    f"after {svc.pss_mb():.1f} MB"
                )
        finally:
            svc.stop()
            tg.close()
            fake.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--provider", choices=["openai", "anthropic", "all"], default="all")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--gap", type=float, default=0.6, help="seconds between turns")
    parser.add_argument("--cap", type=int, default=5_000_000, help="[photos] max_bytes")
    args = parser.parse_args()
    providers = ["openai", "anthropic"] if args.provider == "all" else [args.provider]
    for provider in providers:
        bench(provider, args.turns, args.gap, args.cap)


if __name__ == "__main__":
    main()
