"""A loopback HTTP server that answers from a queue of canned responses, for fake provider APIs.

It runs an aiohttp.web app on 127.0.0.1, port 0, in its own thread and event loop, so sync
tests, ``asyncio.run`` tests and other processes can all talk to it. Every request is logged
in ``requests``; a request the subclass's ``check`` rejects gets the API's own 4xx answer,
is logged in ``rejections`` and does not consume a canned response.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Self

from aiohttp import web


@dataclass(frozen=True)
class Canned:
    """One response to give: status, a JSON value or raw bytes, headers, and a delay first."""

    status: int = 200
    json_body: Any = None
    raw_body: bytes | None = None
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0

    def to_response(self) -> web.Response:
        """The aiohttp response for this canned answer."""
        body = self.raw_body if self.raw_body is not None else json.dumps(self.json_body).encode()
        return web.Response(
            status=self.status, body=body, headers=self.headers, content_type=self.content_type
        )


@dataclass(frozen=True)
class ReceivedRequest:
    """A request the fake received, as it came."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


class CannedServer:
    """Base of the fake APIs: subclasses set ``routes``, ``check`` and ``when_empty``."""

    routes: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.requests: list[ReceivedRequest] = []
        self.rejections: list[str] = []
        self._queue: deque[Canned] = deque()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- what a subclass decides ---------------------------------------------------------------

    def check(self, request: ReceivedRequest) -> Canned | None:
        """The API's refusal of ``request`` (auth, validation), or None to answer it."""
        return None

    def when_empty(self, request: ReceivedRequest) -> Canned:
        """The answer when no canned response is left."""
        return Canned(500, {"error": "fake: no canned response left"})

    # -- queue ---------------------------------------------------------------------------------

    def push(self, *canned: Canned) -> None:
        """Queue responses, answered in order."""
        with self._lock:
            self._queue.extend(canned)

    @property
    def pending(self) -> int:
        """Canned responses not yet given."""
        with self._lock:
            return len(self._queue)

    def last_json(self) -> Any:
        """The JSON body of the last request received."""
        return self.requests[-1].json()

    # -- lifecycle -----------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        received = ReceivedRequest(
            request.method, request.path, dict(request.headers), await request.read()
        )
        self.requests.append(received)
        refusal = self.check(received)
        if refusal is not None:
            body = refusal.raw_body or json.dumps(refusal.json_body).encode()
            self.rejections.append(body.decode())
            return refusal.to_response()
        with self._lock:
            canned = self._queue.popleft() if self._queue else self.when_empty(received)
        if canned.delay_s:
            await asyncio.sleep(canned.delay_s)
        return canned.to_response()

    async def _setup(self) -> None:
        app = web.Application(client_max_size=32 * 1024 * 1024)  # the real APIs take 32 MB bodies
        for route in self.routes:
            app.router.add_post(route, self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    def start(self) -> Self:
        """Serve on 127.0.0.1 at a free port, in a background thread."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._setup())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=serve, name=type(self).__name__, daemon=True)
        self._thread.start()
        ready.wait(5)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        loop, runner = self._loop, self._runner
        if loop is None or runner is None:
            return
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(5)
        self._loop = self._runner = None

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
