"""sd_notify without a dependency: addresses, datagrams, the watchdog interval, and the
environment it takes away from every later fork."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

from actors.service import HEALTH_EVERY_S, health_every_s
from shelldon.sdnotify import Notifier, socket_address, watchdog_interval_s


def bound(tmp_path: Path) -> tuple[socket.socket, str]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = str(tmp_path / "notify")
    sock.bind(path)
    sock.settimeout(2)
    return sock, path


def test_abstract_namespace_name_becomes_a_leading_nul() -> None:
    assert socket_address("@sd-notify/1") == b"\0sd-notify/1"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


def test_an_unusable_notify_socket_value_is_refused() -> None:
    assert socket_address("relative/path") is None
    assert socket_address("@") is None
    assert Notifier.from_environ({"NOTIFY_SOCKET": "nonsense"}).address is None


def test_ready_arrives_as_one_datagram_on_a_path_socket(tmp_path: Path) -> None:
    sock, path = bound(tmp_path)
    with sock:
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": path})
        assert notifier.ready("running")
        assert sock.recv(4096) == b"READY=1\nSTATUS=running"
        assert notifier.watchdog()
        assert sock.recv(4096) == b"WATCHDOG=1"
        assert notifier.stopping()
        assert sock.recv(4096) == b"STOPPING=1"
        notifier.close()


def test_ready_arrives_on_an_abstract_socket() -> None:
    name = f"shelldon-unit-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(b"\0" + name.encode())
        sock.settimeout(2)
        notifier = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name})
        assert notifier.ready()
        assert sock.recv(4096) == b"READY=1"
        notifier.close()


def test_without_systemd_notifying_is_a_quiet_no_op() -> None:
    notifier = Notifier.from_environ({})
    assert notifier.address is None
    assert notifier.ready() is False
    assert notifier.watchdog_s is None


def test_a_vanished_socket_never_raises(tmp_path: Path) -> None:
    notifier = Notifier.from_environ({"NOTIFY_SOCKET": str(tmp_path / "gone")})
    assert notifier.address is not None
    assert notifier.ready() is False  # logged, not raised: the service keeps running
    notifier.close()


def test_the_variables_are_taken_out_of_the_environment() -> None:
    env = {"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "30000000", "PATH": "/bin"}
    notifier = Notifier.from_environ(env)
    assert env == {"PATH": "/bin"}
    assert notifier.watchdog_s == 30.0


def test_a_child_started_afterwards_cannot_speak_for_the_service() -> None:
    code = (
        "import os, subprocess, sys\n"
        "from shelldon.sdnotify import Notifier\n"
        "Notifier.from_environ()\n"
        "out = subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.environ))'],"
        " capture_output=True, text=True).stdout\n"
        "print(out)\n"
    )
    env = {**os.environ, "NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30
    ).stdout
    assert "PATH" in out
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        assert name not in out


def test_the_watchdog_belongs_to_the_pid_systemd_named() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000"}) == 2.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())})
    assert watchdog_interval_s({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "soon"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None


def test_the_main_loop_pings_at_least_twice_per_watchdog_interval() -> None:
    assert health_every_s(None) == HEALTH_EVERY_S
    for interval in (0.6, 3.0, 9.0, 30.0, 180.0):
        assert health_every_s(interval) <= interval / 2
