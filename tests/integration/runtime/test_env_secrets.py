"""Invariant 4 for secrets given as environment variables: no process of the service keeps
them in its environment block (readable in /proc/<pid>/environ), yet the broker still has them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.fake_openai import FakeOpenAI

from .harness import free_port, service_processes

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("base", ["simpleSystemBase", "multiprocTCPBase"])
def test_env_secrets_never_reach_a_forked_process_but_the_broker_uses_them(
    tmp_path: Path, base: str
) -> None:
    fake = FakeOpenAI().start()
    fake.reply_text("the key worked")
    port = free_port()
    env = {
        **os.environ,
        "SHELLDON_HOME": str(tmp_path / "h"),
        "SHELLDON_ACTORS_ADMIN_PORT": str(port),
        "SHELLDON_BRAIN_PROVIDER": "openai",
        "SHELLDON_BRAIN_BASE_URL": fake.base_url,
        "OPENAI_API_KEY": fake.api_key,
        "TELEGRAM_BOT_TOKEN": "123456:ENV-SECRET-TOKEN-abcdefghijklmnop",
        "SHELLDON_ACTORS_BASE": base,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "shelldon", "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        while b"listening" not in proc.stdout.readline():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        tree = service_processes(proc.pid, port)
        assert len(tree) >= (8 if base == "multiprocTCPBase" else 2), tree
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
        proc.terminate()
        proc.wait(10)
        fake.stop()
