"""Small aiohttp servers on loopback for the http_get tests: a site that redirects on request, and
a canary whose hit list proves that a refused request never arrived."""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from shelldon.worker.tools.ssrf import IPAddress


@dataclass
class Site:
    """One running server: where it listens and every request it saw."""

    host: str
    port: int
    hits: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        """The URL of the server's root by address."""
        return f"http://{self.host}:{self.port}"


def _app(site: Site) -> web.Application:
    async def record(request: web.Request) -> None:
        site.hits.append(request.path_qs)
        site.hosts.append(request.headers.get("Host", ""))

    async def hello(request: web.Request) -> web.StreamResponse:
        await record(request)
        return web.Response(text=f"hello from {site.host}", content_type="text/plain")

    async def redirect(request: web.Request) -> web.StreamResponse:
        await record(request)
        status = int(request.query.get("status", "302"))
        return web.Response(status=status, headers={"Location": request.query["to"]})

    async def loop(request: web.Request) -> web.StreamResponse:
        await record(request)
        return web.Response(status=302, headers={"Location": "/loop"})

    async def big(request: web.Request) -> web.StreamResponse:
        await record(request)
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        chunk = b"z" * 65536
        try:
            for _ in range(int(request.query.get("chunks", "80"))):
                await response.write(chunk)
        except (ConnectionResetError, RuntimeError):
            pass
        return response

    async def slow(request: web.Request) -> web.StreamResponse:
        await record(request)
        await asyncio.sleep(float(request.query.get("s", "3")))
        return web.Response(text="late")

    async def bomb(request: web.Request) -> web.StreamResponse:
        await record(request)
        body = gzip.compress(b"\0" * int(request.query.get("size", "5000000")), mtime=0)
        return web.Response(body=body, headers={"Content-Encoding": "gzip"})

    app = web.Application()
    app.router.add_get("/", hello)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/loop", loop)
    app.router.add_get("/big", big)
    app.router.add_get("/slow", slow)
    app.router.add_get("/bomb", bomb)
    app.router.add_route("*", "/{tail:.*}", hello)
    return app


@asynccontextmanager
async def serve(host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[Site]:
    """Run a site on ``host`` (port 0: any free port) for the duration of the block."""
    site = Site(host, port)
    runner = web.AppRunner(_app(site), access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    tcp = web.TCPSite(runner, host, port)
    await tcp.start()
    site.port = runner.addresses[0][1]
    try:
        yield site
    finally:
        await runner.cleanup()


class StubResolver:
    """A resolver from a fixed table; counts calls. A list value is answered in turn (the last
    answer repeats), which is how a rebinding DNS server behaves."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls.append(host)
        answers = self.table.get(host)
        if answers is None:
            raise OSError(f"stub resolver: no such host {host!r}")
        chosen = answers
        if answers and isinstance(answers[0], list):
            chosen = answers[min(self.calls.count(host), len(answers)) - 1]
        return [ipaddress.ip_address(a) for a in chosen]
