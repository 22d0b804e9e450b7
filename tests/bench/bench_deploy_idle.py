"""Idle memory and cold start of `shelldon run` as the systemd unit runs it.

Run: ``.venv/bin/python tests/bench/bench_deploy_idle.py``. For each provider (anthropic, the
deployed default; openai-compatible; scripted) it starts ``python -m shelldon run`` against a
fake Bot API on loopback with ``$NOTIFY_SOCKET`` set, times start → ``READY=1``, waits
``--idle`` seconds, and sums ``Pss`` over the main process and all its descendants (what the
unit's cgroup holds; RSS would double-count shared pages). Where a memory cgroup can be made
here, the cgroup's own charge (what ``MemoryMax=`` is enforced on: PSS-like anon + page cache)
is printed too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests import proctree  # noqa: E402
from tests.integration.runtime.harness import ThreadedFakeTelegram  # noqa: E402

CGROUP_V1 = Path("/sys/fs/cgroup/memory")
CGROUP_V2 = Path("/sys/fs/cgroup")


def make_memory_cgroup() -> Path | None:
    """A fresh memory cgroup (v2, else v1) this process can move a child into, or None."""
    name = f"shelldon-bench-{uuid.uuid4().hex[:8]}"
    for base, charge in ((CGROUP_V2, "memory.current"), (CGROUP_V1, "memory.usage_in_bytes")):
        if not (base / charge).exists() and not (base / "cgroup.controllers").exists():
            continue
        try:
            path = base / name
            path.mkdir()
        except OSError:
            continue
        if (path / charge).exists():
            return path
        path.rmdir()
    return None


def cgroup_bytes(path: Path) -> int:
    for name in ("memory.current", "memory.usage_in_bytes"):
        if (path / name).exists():
            return int((path / name).read_text())
    return 0


def measure(provider: str, idle_s: float) -> dict[str, object]:
    tg = ThreadedFakeTelegram()
    home = Path(tempfile.mkdtemp(prefix="shelldon-bench-"))
    (home / "vault").mkdir()
    from tests.fakes.fake_telegram import TEST_TOKEN

    (home / "vault" / "telegram_token").write_text(TEST_TOKEN)
    (home / "vault" / "anthropic_api_key").write_text("sk-ant-bench")
    (home / "vault" / "openai_api_key").write_text("sk-bench")
    (home / "script.json").write_text(json.dumps([{"when": "hi", "text": "hello"}]))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    name = f"shelldon-bench-{uuid.uuid4().hex}"
    sock.bind(b"\0" + name.encode())
    sock.settimeout(30)
    env = {
        **os.environ,
        "SHELLDON_HOME": str(home),
        "SHELLDON_BRAIN_PROVIDER": provider,
        "SHELLDON_BRAIN_SCRIPT": "script.json",
        "SHELLDON_BRAIN_BASE_URL": "http://127.0.0.1:9",
        "SHELLDON_TELEGRAM_API_BASE": tg.api_base,
        "SHELLDON_TELEGRAM_ALLOWED_USERS": "1001",
        "NOTIFY_SOCKET": "@" + name,
        "WATCHDOG_USEC": "30000000",
    }
    cgroup = make_memory_cgroup()
    started = time.monotonic()
    with (home / "service.log").open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "shelldon", "run"], env=env, stdout=log, stderr=log
        )
    if cgroup is not None:
        (cgroup / "cgroup.procs").write_text(str(proc.pid))
    ready_s = None
    try:
        while ready_s is None:
            data = sock.recv(4096).decode()
            if "READY=1" in data.splitlines():
                ready_s = time.monotonic() - started
        time.sleep(idle_s)
        pids = proctree.with_descendants([proc.pid])
        pss = proctree.pss_kib(pids)
        charge = cgroup_bytes(cgroup) if cgroup is not None else None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        sock.close()
        tg.close()
        if cgroup is not None:
            time.sleep(0.2)
            with contextlib.suppress(OSError):
                cgroup.rmdir()
    return {
        "provider": provider,
        "ready_s": round(ready_s, 2),
        "processes": len(pids),
        "pss_mb": round(pss / 1024, 1),
        "cgroup_mb": None if charge is None else round(charge / 1024 / 1024, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds idle before measuring")
    parser.add_argument("--providers", default="anthropic,openai,scripted")
    args = parser.parse_args()
    print(f"{'provider':<10} {'start→READY':>12} {'procs':>6} {'PSS idle':>10} {'cgroup':>10}")
    for provider in args.providers.split(","):
        r = measure(provider, args.idle)
        cg = "n/a" if r["cgroup_mb"] is None else f"{r['cgroup_mb']} MB"
        print(
            f"{provider:<10} {r['ready_s']:>10} s {r['processes']:>6} {r['pss_mb']:>7} MB {cg:>10}"
        )


if __name__ == "__main__":
    main()
