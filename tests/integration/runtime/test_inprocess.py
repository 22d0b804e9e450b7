"""The production base as the owner runs it: ``shelldon run`` is one process of actors plus the
zygote that forks the workers. It listens on no port, and no process but the main one holds a
credential in its memory — not the zygote, not a worker (invariant 4), checked by reading
their memory, with the main process as the control that proves the scan finds the secrets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import proctree
from tests.fakes.fake_openai import FakeOpenAI
from tests.fakes.fake_telegram import TEST_TOKEN

from .harness import ThreadedFakeTelegram, chat_service, parent_of, service_processes

pytestmark = pytest.mark.slow

OWNER = 1001
SPARE_KEY = "sk-spare-fallback-5c1f0e9d7a"
_REGION = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (r)")


def memory_holds(pid: int, needles: tuple[bytes, ...]) -> set[bytes]:
    """Which of ``needles`` appear anywhere in the readable memory of ``pid``."""
    found: set[bytes] = set()
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            match = _REGION.match(line)
            if match is None or line.rstrip().endswith(("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                continue
            start, end = int(match.group(1), 16), int(match.group(2), 16)
            try:
                mem.seek(start)
                chunk = mem.read(end - start)
            except OSError:
                continue
            found |= {n for n in needles if n in chunk}
    return found


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], FakeOpenAI, Path]]:
    tg = ThreadedFakeTelegram()
    fake = FakeOpenAI().start()
    for _ in range(3):
        fake.reply_tool_calls(("get_time", {}))
        fake.reply_text("the clock says hi")
    home = tmp_path / "home"
    (home / "vault").mkdir(parents=True)
    (home / "vault" / "telegram_token").write_text(TEST_TOKEN + "\n")
    (home / "vault" / "openai_api_key").write_text(fake.api_key + "\n")
    (home / "vault" / "spare_api_key").write_text(SPARE_KEY + "\n")
    env = {
        **os.environ,
        "SHELLDON_HOME": str(home),
        "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
        "SHELLDON_TELEGRAM_ALLOWED_USERS": str(OWNER),
        "SHELLDON_BRAIN_PROVIDER": "openai",
        "SHELLDON_BRAIN_BASE_URL": fake.base_url,
        # A fallback's key follows the main key's path: the broker's memory and nowhere else.
        "SHELLDON_BRAIN_FALLBACK_PROVIDER": "openai",
        "SHELLDON_BRAIN_FALLBACK_MODEL": "gpt-spare",
        "SHELLDON_BRAIN_FALLBACK_KEY": "spare_api_key",
    }
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "shelldon", "run"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        tg.wait(lambda: tg.fake.commands, timeout=30)
        tg.do(tg.fake.queue_message, OWNER, "what time is it?")
        tg.wait(lambda: any("the clock says hi" in m.visible for m in tg.fake.sent), timeout=20)
        yield proc, fake, home
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()
        tg.close()
        fake.stop()


def test_one_process_of_actors_and_a_zygote_that_listen_on_no_port(
    service: tuple[subprocess.Popen[bytes], FakeOpenAI, Path],
) -> None:
    proc, _fake, _home = service
    time.sleep(0.3)  # the turn's worker has exited and been reaped
    tree = service_processes(proc.pid)
    # the main process, the zygote and (at most) the zygote's one spare worker: in a PID
    # namespace of its own, that is the stub outside and the worker inside
    assert 2 <= len(tree) <= 4, tree
    assert proctree.listening_sockets(tree) == []


def test_no_process_but_the_main_one_holds_a_credential_in_memory(
    service: tuple[subprocess.Popen[bytes], FakeOpenAI, Path],
) -> None:
    proc, fake, home = service
    secrets = (TEST_TOKEN.encode(), fake.api_key.encode(), SPARE_KEY.encode())
    tree = service_processes(proc.pid)
    assert memory_holds(proc.pid, secrets) == set(secrets)  # the transport and the broker
    for pid in tree - {proc.pid}:
        assert memory_holds(pid, secrets) == set(), pid
    log_lines = [json.loads(line) for line in (home.parent / "run.log").read_text().splitlines()]
    assert not [line for line in log_lines if line.get("level") == "error"]
    (ready,) = [line for line in log_lines if line.get("event") == "brain_ready"]
    assert (ready["provider"], ready["fallback"]) == ("openai", "openai gpt-spare")


def test_a_lost_zygote_stops_the_service_for_a_clean_restart(tmp_path: Path) -> None:
    # A clean zygote cannot be made again once the secrets are in memory: the turn apologizes
    # and the service exits non-zero, so systemd starts it afresh.
    with chat_service(tmp_path / "h") as proc:
        assert proc.stdout is not None and proc.stdin is not None
        tree = service_processes(proc.pid)
        (zygote,) = [p for p in tree if parent_of(p) == proc.pid]
        os.kill(zygote, signal.SIGKILL)
        proc.stdin.write(b"hello\n")
        proc.stdin.flush()
        started = time.monotonic()
        said = b""
        while b"something broke" not in said:
            line = proc.stdout.readline()
            assert line, said
            said += line
        assert proc.wait(timeout=15) == 1
        assert time.monotonic() - started < 15
        time.sleep(0.2)
        assert not [p for p in tree if proctree.is_alive(p)]
