"""Invariant 4 for secrets given as environment variables: no process of the service keeps
them in its environment block (readable in /proc/<pid>/environ), yet the broker still has them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.fakes.fake_openai import FakeOpenAI

from .harness import chat_service, service_processes

pytestmark = pytest.mark.slow


def test_env_secrets_never_reach_a_forked_process_but_the_broker_uses_them(
    tmp_path: Path,
) -> None:
    fake = FakeOpenAI().start()
    fake.reply_text("the key worked")
    env = {
        "SHELLDON_BRAIN_PROVIDER": "openai",
        "SHELLDON_BRAIN_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": fake.api_key,
        "TELEGRAM_BOT_TOKEN": "123456:ENV-SECRET-TOKEN-abcdefghijklmnop",
    }
    try:
        with chat_service(tmp_path / "h", **env) as proc:
            assert proc.stdout is not None and proc.stdin is not None
            tree = service_processes(proc.pid)
            assert len(tree) >= 2, tree  # the main process and the zygote at least
            for pid in tree:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
                assert fake.api_key.encode() not in environ, pid
                assert b"ENV-SECRET-TOKEN" not in environ, pid
            proc.stdin.write(b"hello\n")
            proc.stdin.flush()
            deadline = time.monotonic() + 20
            line = b""
            while b"the key worked" not in line:
                assert time.monotonic() < deadline, "no answer from the model"
                line = proc.stdout.readline()
            assert fake.requests, "the broker never called the model"
    finally:
        fake.stop()
