"""A TCP listener on 127.0.0.1 that records every byte sent to it: the exfiltration canary.

A planted configuration that fires sends the vault's token here (curl, a filter, a hook); the
test then asserts that nothing arrived. It also answers like a tiny HTTP server, so a benign
``curl`` of it succeeds and an honest request can be told apart from a stolen one.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

FAKE_TOKEN = "123456789:AAFakeTokenForTestsOnly-never-real-000"
"""What the tests put in the vault's ``telegram_token``: a listener must never see it."""


@dataclass
class Listener:
    """Where it listens and everything each connection sent."""

    port: int
    received: list[bytes] = field(default_factory=list)

    @property
    def url(self) -> str:
        """Its root as an http URL."""
        return f"http://127.0.0.1:{self.port}"

    def everything(self) -> bytes:
        """All bytes received so far, from every connection."""
        return b"".join(self.received)


@contextmanager
def listening() -> Iterator[Listener]:
    """Run a listener for the duration of the block (a daemon thread accepts and answers)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.1)
    listener = Listener(server.getsockname()[1])
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                listener.received.append(_read_request(conn))
                body = b"status: fine\n"
                head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                with suppress(OSError):
                    conn.sendall(head + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener
    finally:
        time.sleep(0.05)  # let a last connection in flight be recorded
        stop.set()
        thread.join(2)
        server.close()


def _read_request(conn: socket.socket) -> bytes:
    """What the client sent: headers, and a body up to its Content-Length (or a short wait)."""
    conn.settimeout(0.5)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            if not chunk:
                return data
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip() or 0)
        while len(body) < length:
            chunk = conn.recv(65536)
            if not chunk:
                break
            body += chunk
            data += chunk
    except (TimeoutError, OSError, ValueError):
        pass
    return data
