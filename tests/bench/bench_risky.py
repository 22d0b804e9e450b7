"""Overhead of the RISKY tools' guards and runner: prints p50/p95 per operation.

Run: .venv/bin/python tests/bench/bench_risky.py
Runs in a forked child (run_bounded makes its caller a child subreaper), on a temp workspace,
against an aiohttp server on 127.0.0.1 for http_get.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from aiohttp import web

from shelldon.proc.sweep import process_table
from shelldon.worker.tools.git import check_git_args, git, git_env, planted_findings, prepare_git
from shelldon.worker.tools.gitconfig import attribute_findings, read_config
from shelldon.worker.tools.http import make_http_get
from shelldon.worker.tools.registry import ToolContext
from shelldon.worker.tools.risky_env import fresh_home
from shelldon.worker.tools.shell import run_shell
from shelldon.worker.tools.ssrf import DEFAULT_POLICY, AddressPolicy, normalize_host
from shelldon.worker.tools.write import write_file


def measure(label: str, fn: Callable[[], object], runs: int) -> None:
    """Time ``fn`` ``runs`` times and print p50 and p95 in milliseconds."""
    fn()  # warm
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, int(len(samples) * 0.95))]
    print(f"{label:<44} p50 {statistics.median(samples):8.3f} ms   p95 {p95:8.3f} ms")


def serve_in_thread() -> int:
    """Start a tiny site on 127.0.0.1 in a daemon thread; return its port."""
    ready = threading.Event()
    port: list[int] = []

    async def hello(_request: web.Request) -> web.Response:
        return web.Response(text="hello")

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/", hello)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port.append(runner.addresses[0][1])
        ready.set()
        await asyncio.Event().wait()

    threading.Thread(target=lambda: asyncio.run(main()), daemon=True).start()
    ready.wait(5)
    return port[0]


def bench() -> None:
    home = Path(tempfile.mkdtemp())
    (home / "workspace").mkdir()
    (home / "vault").mkdir()
    ctx = ToolContext(workspace=home / "workspace", vault=home / "vault")
    ws, vault = ctx.workspace, ctx.vault
    print(f"processes visible in /proc: {len(process_table())}")
    measure("ssrf: normalize + check '0x7f.1' (refused)", lambda: _refused("0x7f.1"), 2000)
    measure("ssrf: normalize + check '93.184.215.14'", lambda: _allowed("93.184.215.14"), 2000)
    argv = ["log", "--oneline", "--format=%h %s", "-5", "--", "src"]
    measure("git: check_git_args (log, 6 args)", lambda: check_git_args(argv, ws, vault), 2000)
    measure("process table scan (/proc/*/stat)", process_table, 50)
    measure("run_shell 'true' (fork, rlimits, sweep)", lambda: run_shell(ctx, "true"), 30)
    measure("run_shell 'sleep 60 &' (bg child killed)", lambda: run_shell(ctx, "sleep 60 &"), 30)
    git(ctx, "init")
    measure("git status (policy + sanitized env + run)", lambda: git(ctx, "status"), 20)
    bench_neutral_git(ctx)
    measure(
        "write_file 1 KiB (jail, fsync, rename)", lambda: write_file(ctx, "a.txt", "x" * 1024), 200
    )
    port = serve_in_thread()
    policy = AddressPolicy(exempt=frozenset({(ipaddress.ip_address("127.0.0.1"), port)}))
    http_get = make_http_get(policy)
    measure(
        "http_get loopback (guard, pinned, fresh loop)",
        lambda: http_get(ctx, f"http://127.0.0.1:{port}/"),
        50,
    )


def _fresh_home_round_trip() -> None:
    with fresh_home():
        pass


def _prepare(ctx: ToolContext, args: str) -> None:
    with fresh_home() as home:
        prepare_git(ctx.workspace, ctx.vault, args, home)


def bench_neutral_git(ctx: ToolContext) -> None:
    """What issue 18's point 2 adds to an approved git call: the fresh HOME (made, written,
    removed), and reading the repository's config (one ``git config`` run), its attributes
    files (a walk of the workspace) and, for a fetch or push, each local remote's config."""
    ws = ctx.workspace
    measure("neutral: fresh_home (mkdtemp, gitconfig, rmtree)", _fresh_home_round_trip, 200)
    with fresh_home() as home:
        env = git_env(ws, home)
        measure("neutral: read_config (git config --list)", lambda: read_config(ws, env), 50)
        measure(
            "neutral: attributes walk (empty workspace)",
            lambda: attribute_findings(ws, ws / ".git"),
            200,
        )
        for d in range(100):
            (ws / f"dir{d}").mkdir(exist_ok=True)
            for f in range(10):
                (ws / f"dir{d}" / f"f{f}.txt").write_text("x")
        (ws / "dir7" / ".gitattributes").write_text("*.txt text\n")
        measure(
            "neutral: attributes walk (1000 files, 100 dirs)",
            lambda: attribute_findings(ws, ws / ".git"),
            100,
        )
        measure(
            "neutral: planted_findings, git status",
            lambda: planted_findings(["status"], ws, env),
            50,
        )
        subprocess.run(["git", "init", "-q", "--bare", str(ws / "remote.git")], check=True)
        git(ctx, "remote add origin remote.git")
        measure(
            "neutral: planted_findings, git push (1 local remote)",
            lambda: planted_findings(["push", "origin", "main"], ws, env),
            50,
        )
    measure("neutral: prepare_git status, total", lambda: _prepare(ctx, "status"), 50)
    measure("git status end to end (with 1000 files)", lambda: git(ctx, "status"), 20)


def _refused(host: str) -> None:
    address = normalize_host(host)
    assert not isinstance(address, str)
    try:
        DEFAULT_POLICY.check(address, 80, redirect=False)
    except ValueError:
        return


def _allowed(host: str) -> None:
    address = normalize_host(host)
    assert not isinstance(address, str)
    DEFAULT_POLICY.check(address, 80, redirect=True)


if __name__ == "__main__":
    pid = os.fork()
    if pid == 0:
        try:
            bench()
        finally:
            sys.stdout.flush()
            os._exit(0)
    os.waitpid(pid, 0)
