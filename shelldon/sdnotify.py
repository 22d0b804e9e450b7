"""sd_notify without a dependency: one datagram per state change to ``$NOTIFY_SOCKET``.

systemd (``Type=notify``) hands the service a unix datagram socket in ``$NOTIFY_SOCKET`` (a path,
or an abstract-namespace name written with a leading ``@``) and, with ``WatchdogSec=``, the
interval in ``$WATCHDOG_USEC``. ``Notifier.from_environ`` takes those variables out of the
environment so no actor, worker or tool inherits them and speaks for the service.
Sending never raises: without systemd (or with a broken socket) it is a logged no-op.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import MutableMapping

import structlog

log = structlog.get_logger(__name__)

NOTIFY_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
"""The variables systemd sets for the notify protocol (removed by ``from_environ``)."""


def socket_address(raw: str) -> str | bytes | None:
    """The address to ``sendto`` for a ``$NOTIFY_SOCKET`` value, or None when it is unusable."""
    if raw.startswith("@") and len(raw) > 1:
        # Abstract namespace: a leading NUL byte instead of the '@'.
        return b"\0" + raw[1:].encode()
    if raw.startswith("/"):
        return raw
    return None


def watchdog_interval_s(environ: MutableMapping[str, str]) -> float | None:
    """The watchdog interval in seconds, or None when systemd watches no process of ours
    (``$WATCHDOG_PID``, when set, names the one it watches)."""
    raw = environ.get("WATCHDOG_USEC", "")
    watched = environ.get("WATCHDOG_PID", "")
    if watched and watched != str(os.getpid()):
        return None
    try:
        usec = int(raw)
    except ValueError:
        return None
    return usec / 1_000_000 if usec > 0 else None


class Notifier:
    """Sends ``KEY=VALUE`` lines to systemd; ``address`` is None when there is no socket."""

    def __init__(self, address: str | bytes | None, watchdog_s: float | None = None) -> None:
        self.address = address
        self.watchdog_s = watchdog_s
        self._sock: socket.socket | None = None

    @classmethod
    def from_environ(cls, environ: MutableMapping[str, str] | None = None) -> Notifier:
        """Read and remove ``$NOTIFY_SOCKET`` and the watchdog variables."""
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        address = socket_address(raw) if raw else None
        if raw and address is None:
            log.warning("notify_socket_unusable", notify_socket=raw)
        watchdog_s = watchdog_interval_s(env)
        for name in NOTIFY_VARS:
            env.pop(name, None)
        return cls(address, watchdog_s)

    def notify(self, *fields: str) -> bool:
        """Send ``fields`` (e.g. ``"READY=1"``) in one datagram; True when it was sent."""
        if self.address is None:
            return False
        data = "\n".join(fields).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.sendto(data, self.address)
        except OSError as exc:
            log.warning("sd_notify_failed", fields=",".join(fields), error=str(exc))
            return False
        return True

    def ready(self, status: str = "") -> bool:
        """Tell systemd the service is up (``READY=1``)."""
        return self.notify("READY=1", *((f"STATUS={status}",) if status else ()))

    def watchdog(self) -> bool:
        """Pet the watchdog (``WATCHDOG=1``)."""
        return self.notify("WATCHDOG=1")

    def stopping(self, status: str = "") -> bool:
        """Tell systemd the service is stopping (``STOPPING=1``)."""
        return self.notify("STOPPING=1", *((f"STATUS={status}",) if status else ()))

    def status(self, text: str) -> bool:
        """A one-line status shown by ``systemctl status``."""
        return self.notify(f"STATUS={text}")

    def close(self) -> None:
        """Close the socket (a later ``notify`` opens a new one)."""
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
            self._sock = None
