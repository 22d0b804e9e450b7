"""Patches to Thespian 4.0.1 that make its multiprocess bases safe to run for months on a home LAN.

``harden_thespian()`` applies them all, once, in the process that starts the actor system. Every
Thespian process (the Admin, its logger, every actor) is forked from that process, so each one
runs with the patches already in place. Each patch is a small function below saying what it
changes, why, and how it could be offered upstream:

- ``bind_loopback_only``: every socket binds 127.0.0.1, never ``('', port)`` (0.0.0.0).
- ``refuse_untrusted_pickles``: the TCP and UDP transports seal every frame with an HMAC under a
  per-service key and unpickle only sealed frames, through ``GuardedUnpickler``, which resolves
  only classes in the ``TRUSTED`` registry; anything else drops the connection.
- ``create_only_trusted_actors``: the Admin creates (and imports) only actor classes from trusted
  packages (``actors`` by default), whoever asks.
- ``fix_logger_restart``: a dead logger process is restarted instead of crashing the Admin.
- ``guard_process_start``: every process of the system, the Admin included, gets
  ``PR_SET_PDEATHSIG(SIGKILL)``, and none keeps a listening socket it inherited.
- ``log_straight_to_stream``: each process's stdlib logging and Thespian's internal ``thesplog``
  go straight to this process's handlers (shelldon's JSON lines) with no hop through the logger.
- ``remember_admin_process``: keeps the Admin's process object so the starter can reap it and
  find the Admin's session (every process of the system lives in it).
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import io
import logging
import multiprocessing
import os
import pickle
import signal
import socket
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, ClassVar

import structlog

log = structlog.get_logger(__name__)

LOOPBACK_V4 = "127.0.0.1"
LOOPBACK_V6 = "::1"

_PR_SET_PDEATHSIG = 1
_FRAME_TAG = b"SHLD1"
_MAC_BYTES = 32
_UNSEALED_ACKS = {pickle.dumps(ack): ack for ack in ("ACK", "ACK+DATAERR")}
# The wire key: made once by harden_thespian in the starting process, inherited by every fork.
_wire_key = bytearray()
_applied: list[str] = []
_admin_processes: list[Any] = []
_actor_process = False


class RefusedPickle(pickle.UnpicklingError):
    """An incoming pickle named a class that is not in the trusted registry."""


class TrustedClasses:
    """The registry of classes allowed to arrive over an actor socket.

    A class is trusted by name (``trust_class``) or because it is defined in a trusted module
    (``trust_module``: data-only modules such as ``shelldon.contracts`` and ``actors.messages``).
    Extend it before the actor system starts: forked actors inherit the registry as it was then.
    """

    def __init__(self) -> None:
        self._names: set[tuple[str, str]] = set()
        self._modules: set[str] = set()
        self._actor_packages: set[str] = set()

    def trust_class(self, cls: type) -> None:
        """Let instances of ``cls`` travel between actors."""
        self._names.add((cls.__module__, cls.__qualname__))

    def trust_name(self, module: str, name: str) -> None:
        """Like ``trust_class`` for a class that is not imported here (it stays unimported)."""
        self._names.add((module, name))

    def trust_module(self, module: str) -> None:
        """Trust every class *defined* in ``module`` (not imported into it); for data modules."""
        self._modules.add(module)

    def trust_actor_package(self, package: str) -> None:
        """Let actors whose classes live in ``package`` (or below it) be created."""
        self._actor_packages.add(package)

    def allows_actor_module(self, module: str) -> bool:
        """Whether an actor class from ``module`` may be created (and its module imported)."""
        return any(module == p or module.startswith(p + ".") for p in self._actor_packages)

    def allows(self, module: str, name: str) -> bool:
        """Whether ``module.name`` may be resolved (checked before anything is imported)."""
        if (module, name) in self._names:
            return True
        # A dotted name walks attributes (``os.system`` through any module): never by module rule.
        return module in self._modules and "." not in name and not name.startswith("_")

    def by_module_rule(self, module: str, name: str) -> bool:
        """Whether ``module.name`` is trusted only because its module is."""
        return (module, name) not in self._names and module in self._modules


TRUSTED = TrustedClasses()

# Thespian's own messages and addresses that cross a socket in a single-host system. Left out
# on purpose: source loading (ValidateSource, ValidatedSource, SourceHashTransfer*,
# RegisterSourceAuthority: they carry code), conventions with other hosts (Convention*),
# LoggerFileDup (makes the logger append to a named file) and LogAggregator (ships logs away).
_THESPIAN_NAMES = {
    "thespian.actors": (
        "ActorAddress",
        "ActorExitRequest",
        "ChildActorExited",
        "PoisonMessage",
        "WakeupMessage",
        "WatchMessage",
        "DeadEnvelope",
        "LoadedSource",
        "UnloadedSource",
    ),
    "thespian.system.messages.admin": (
        "QueryExists",
        "QueryAck",
        "SystemShutdown",
        "SystemShutdownCompleted",
        "PendingActor",
        "PendingActorResponse",
        "HandleDeadLetters",
        "CapabilityUpdate",
        "NewCapabilities",
    ),
    "thespian.system.messages.multiproc": (
        "EndpointConnected",
        "LoggerConnected",
        "ChildMayHaveDied",
    ),
    "thespian.system.messages.status": (
        "Thespian_StatusReq",
        "Thespian_SystemStatus",
        "Thespian_ActorStatus",
    ),
    "thespian.system.messages.logcontrol": ("SetLogging",),
    "thespian.system.logdirector": ("LoggerExitRequest",),
    "thespian.system.transport": ("ForwardMessage",),
    "thespian.system.transport.IPBase": (
        "TCPv4ActorAddress",
        "UDPv4ActorAddress",
        "RoutedTCPv4ActorAddress",
        "TXOnlyAdminTCPv4ActorAddress",
    ),
    "thespian.system.transport.TCPTransport": (
        "RoutedTCPv4ActorAddress",
        "TXOnlyAdminTCPv4ActorAddress",
    ),
}
# Plain values those messages carry: address families inside addresses, records to the logger.
_STDLIB_CLASSES: tuple[type, ...] = (
    socket.AddressFamily,
    socket.SocketKind,
    logging.LogRecord,
    timedelta,
    datetime,
    set,
    frozenset,
    bytearray,
    complex,
)
for _module, _names in _THESPIAN_NAMES.items():
    for _name in _names:
        TRUSTED.trust_name(_module, _name)
for _cls in _STDLIB_CLASSES:
    TRUSTED.trust_class(_cls)
TRUSTED.trust_module("shelldon.contracts")
TRUSTED.trust_module("actors.messages")
TRUSTED.trust_actor_package("actors")


class GuardedUnpickler(pickle.Unpickler):
    """An Unpickler that resolves only classes the ``TRUSTED`` registry allows."""

    # Positive cache: the registry only grows, so a class once let in stays allowed.
    _resolved: ClassVar[dict[tuple[str, str], Any]] = {}

    def find_class(self, module: str, name: str) -> Any:
        """Resolve ``module.name`` if trusted, else raise ``RefusedPickle`` (nothing imported)."""
        found = self._resolved.get((module, name))
        if found is not None:
            return found
        if not TRUSTED.allows(module, name):
            raise _refuse(module, name, "not in the trusted registry")
        found = super().find_class(module, name)
        if TRUSTED.by_module_rule(module, name) and not (
            isinstance(found, type) and found.__module__ == module
        ):
            raise _refuse(module, name, "not a class defined in that module")
        self._resolved[(module, name)] = found
        return found


def _refuse(module: str, name: str, why: str) -> RefusedPickle:
    log.warning("pickle_refused", module=module, name=name, why=why, pid=os.getpid())
    return RefusedPickle(
        f"refused to unpickle {module}.{name}: {why}; if it is a message class, trust it with "
        "actors.hardening.TRUSTED.trust_class() before the actor system starts"
    )


def guarded_loads(data: bytes) -> Any:
    """``pickle.loads`` through ``GuardedUnpickler``."""
    return GuardedUnpickler(io.BytesIO(data)).load()


def _mac(body: bytes) -> bytes:
    if not _wire_key:
        raise RefusedPickle("no wire key in this process: it cannot talk to the actor system")
    return hmac.new(_wire_key, body, hashlib.sha256).digest()


def seal_pickled(body: bytes) -> bytes:
    """Prefix already-pickled ``body`` with an HMAC under this system's wire key."""
    return _FRAME_TAG + _mac(body) + body


def seal_frame(obj: Any) -> bytes:
    """Pickle ``obj`` and seal it (``seal_pickled``)."""
    return seal_pickled(pickle.dumps(obj))


def open_frame(data: bytes) -> Any:
    """Check a sealed frame's HMAC, then unpickle it through ``GuardedUnpickler``.

    Thespian's own acknowledgements are the only unsealed frames let in (they are plain strings).
    """
    if data in _UNSEALED_ACKS:
        return _UNSEALED_ACKS[data]
    head = len(_FRAME_TAG)
    body = data[head + _MAC_BYTES :]
    if not data.startswith(_FRAME_TAG) or not hmac.compare_digest(
        data[head : head + _MAC_BYTES], _mac(body)
    ):
        log.warning("frame_refused", why="not sealed with this system's wire key", pid=os.getpid())
        raise RefusedPickle("refused a frame not sealed with this actor system's wire key")
    return guarded_loads(body)


def forget_wire_key() -> None:
    """Overwrite this process's copy of the wire key (call it in a forked worker before any tool
    runs: code there must not be able to forge actor messages). Best effort: copies made by
    hashing may linger in freed memory."""
    for i in range(len(_wire_key)):
        _wire_key[i] = 0
    _wire_key.clear()


class GuardedSerializer:
    """Stands in for the ``pickle`` module in Thespian's transports: sealed, guarded frames."""

    dumps = staticmethod(seal_frame)
    loads = staticmethod(open_frame)


def bind_loopback_only() -> None:
    """Make every Thespian IP address loopback, and bind listening sockets to that address.

    Why: 4.0.1 binds ``('', port)`` for every actor and the Admin, i.e. 0.0.0.0 on every
    interface, even with ``THESPIAN_BASE_IPADDR=127.0.0.1``; on home Wi-Fi that exposes the actors
    to the LAN. How: an unset/any/empty base address becomes 127.0.0.1 (::1 for IPv6) and the
    bind name is the address itself. Upstream: a ``bindname = sa`` when the address is explicit.
    """
    from thespian.system.transport import IPBase

    original = IPBase.IPActorAddress.__init__

    def __init__(
        self: Any,
        af: int,
        socktype: int,
        proto: int,
        baseaddr: str | None,
        port: int,
        external: Any = False,
    ) -> None:
        if baseaddr in (None, "", "0.0.0.0", "::"):  # noqa: S104  (turning "any" into loopback)
            baseaddr = LOOPBACK_V6 if af == socket.AF_INET6 else LOOPBACK_V4
        original(self, af, socktype, proto, baseaddr, port, external)
        self.bindname = self.sockname

    IPBase.IPActorAddress.__init__ = __init__


def refuse_untrusted_pickles() -> None:
    """Seal every frame with an HMAC and unpickle only sealed frames, through ``GuardedUnpickler``.

    Why: the transports call ``pickle.loads`` on whatever a peer sends, so one crafted pickle to
    any actor port runs code in that actor (the one holding the API key, say); and any local
    process could forge a well-formed message (an approval, say). How: each transport module
    looks its ``serializer`` global up at call time; we replace it with ``GuardedSerializer``.
    Frames carry an HMAC-SHA256 under a random per-service key that only forks of the starting
    process hold; a frame without it, or naming an untrusted class, raises inside the
    transport's own error path, which logs, NAKs and drops the connection. Upstream: a pluggable
    serializer with an allowlist hook, and an optional shared-secret frame MAC.
    """
    from thespian.system.transport import TCPTransport, UDPTransport

    if not _wire_key:
        _wire_key.extend(os.urandom(32))

    TCPTransport.serializer = GuardedSerializer
    UDPTransport.serializer = GuardedSerializer


def fix_logger_restart() -> None:
    """Let the Admin restart a dead logger process instead of raising ``AttributeError``.

    Why: ``MultiProcReplicator.childDied`` reads ``self.logDefs`` but the attribute is
    ``self.logdefs``; when the logger dies the Admin's SIGCHLD path raises. How: a read-only
    ``logDefs`` property aliasing ``logdefs``. Upstream: a one-character rename.
    """
    from thespian.system import multiprocCommon

    multiprocCommon.MultiProcReplicator.logDefs = property(lambda self: self.logdefs)


def create_only_trusted_actors() -> None:
    """Refuse to create (or even import) an actor class outside the trusted actor packages.

    Why: a ``PendingActor`` message names the actor class as a string; the Admin imports that
    module and starts the class, so any process that can reach the Admin port could import any
    installed module (imports run code) and start any ``Actor`` subclass it finds. How: wrap
    ``MultiProcReplicator._startChildActor`` (Admin and actors alike) to raise Thespian's own
    ``InvalidActorSpecification`` first, which it reports to the requester. Upstream: an
    "allowed actor modules" capability.
    """
    from thespian.actors import InvalidActorSpecification
    from thespian.system import multiprocCommon

    start_child_actor = multiprocCommon.MultiProcReplicator._startChildActor

    def _startChildActor(
        self: Any, child_addr: Any, child_class: Any, *args: Any, **kw: Any
    ) -> Any:
        if isinstance(child_class, str):
            module = child_class.rpartition(".")[0]
        else:
            module = getattr(child_class, "__module__", "")
        if not TRUSTED.allows_actor_module(module):
            log.warning("actor_class_refused", actor_class=str(child_class))
            raise InvalidActorSpecification(
                child_class,
                "not in a trusted actor package; trust it with "
                "actors.hardening.TRUSTED.trust_actor_package() before the system starts",
            )
        return start_child_actor(self, child_addr, child_class, *args, **kw)

    multiprocCommon.MultiProcReplicator._startChildActor = _startChildActor


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies; exit now if it already has.

    Linux only (``prctl(PR_SET_PDEATHSIG)``); elsewhere it does nothing. Call it first thing in a
    forked child, with the pid that forked it. The signal fires when the parent *thread* that
    forked us exits.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}")
    # The parent may have died between fork and prctl: then no signal will ever come.
    if os.getppid() != parent_pid:
        os._exit(1)


def _die_with_process_parent() -> None:
    """``die_with_parent`` for a ``multiprocessing`` child, which knows who started it."""
    parent = multiprocessing.parent_process()
    die_with_parent(parent.pid if parent is not None and parent.pid else os.getppid())


def close_inherited_listeners() -> None:
    """Close every TCP listening socket this process inherited (it accepts on none of them)."""
    for entry in os.listdir("/proc/self/fd"):
        fd = int(entry)
        try:
            sock = socket.socket(fileno=fd)
        except OSError:
            continue  # not a socket (or already closed: listdir's own descriptor)
        try:
            listening = sock.family in (socket.AF_INET, socket.AF_INET6) and (
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
            )
        except OSError:
            listening = False
        sock.detach()
        if listening:
            os.close(fd)


def _bind_process_actor(name: str) -> None:
    structlog.contextvars.bind_contextvars(actor=name)


def _default_stop_signals() -> None:
    """Undo the starter's Python handlers for stop signals: Thespian sets none in the Admin, so
    a handler inherited from ``shelldon run`` (say, "set a stop flag") would make the Admin
    ignore SIGTERM forever. With the default action, a SIGTERM'd Admin dies and takes every
    actor with it (``PR_SET_PDEATHSIG``)."""
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def _admin_without_double_fork() -> None:
    """Make ``startAdmin``'s daemonizing ``os.fork()`` return 0 once, in this process only.

    ``startAdmin`` calls setsid, then forks and lets the launcher exit so that the Admin outlives
    whoever started it. shelldon wants the opposite: the service's main process owns the system,
    and the Admin must die with it. So this process (already in its own session) stays the Admin;
    the real ``os.fork`` is back before the Admin forks anything (actors, its logger).
    """
    real_fork = os.fork

    def fork_once_as_child() -> int:
        os.fork = real_fork
        return 0

    os.fork = fork_once_as_child


def in_actor_process() -> bool:
    """Whether this process is an actor process started by a hardened multiprocess base."""
    return _actor_process


def guard_process_start() -> None:
    """Prepare every Thespian process before it runs: orphans die, leaked listeners close.

    Why: when the supervisor, the Admin or the service's main process dies, 4.0.1 leaves their
    children running as orphans (still listening, still holding files); and the Admin and the
    logger inherit the starting process's listening socket, which then lives on in every actor.
    How: wrap the process entry points ``startChild``, ``startupASLogger`` and ``startAdmin``
    that ``multiprocCommon`` looks up at call time. Each process gets ``PR_SET_PDEATHSIG(SIGKILL)``
    first thing, closes listeners it inherited, and binds its ``actor`` name for logs. The Admin
    gets the default action back for SIGTERM/SIGINT/SIGHUP (``_default_stop_signals``) and is
    no longer double-forked away from the starter (``_admin_without_double_fork``), so it too
    dies with the process that started it. Upstream: a "Process Death Signal" capability,
    ``closeUnusedFiles`` (present, commented out) for listeners, and an "attached Admin" option.
    """
    from thespian.system import multiprocCommon

    start_child = multiprocCommon.startChild
    start_logger = multiprocCommon.startupASLogger
    start_admin = multiprocCommon.startAdmin

    def startChild(child_class: Any, *args: Any, **kwargs: Any) -> Any:
        global _actor_process  # noqa: PLW0603  (one flag per forked process)
        _die_with_process_parent()
        _actor_process = True
        _bind_process_actor(str(child_class).rpartition(".")[-1])
        return start_child(child_class, *args, **kwargs)

    def startupASLogger(*args: Any, **kwargs: Any) -> Any:
        _die_with_process_parent()
        close_inherited_listeners()
        _bind_process_actor("thespian-logger")
        return start_logger(*args, **kwargs)

    def startAdmin(*args: Any, **kwargs: Any) -> Any:
        _die_with_process_parent()
        _default_stop_signals()
        close_inherited_listeners()
        _bind_process_actor("thespian-admin")
        _admin_without_double_fork()
        return start_admin(*args, **kwargs)

    multiprocCommon.startChild = startChild
    multiprocCommon.startupASLogger = startupASLogger
    multiprocCommon.startAdmin = startAdmin


def _direct_root_logger(_to_addr: Any, _transport: Any, logLevel: int = 0) -> logging.Logger:
    """A root logger with this process's current handlers, in place of Thespian's forwarder."""
    inherited = logging.root
    root = logging.RootLogger(inherited.level or logLevel or logging.WARNING)
    root.handlers = list(inherited.handlers)
    return root


def _thesplog_to_structlog(msg: Any, *args: Any, **kw: Any) -> None:
    """Thespian's internal log call, rendered as one of our log lines (no temp file)."""
    from thespian.system import utilis

    level = kw.get("level", logging.INFO)
    if level < utilis._thesplog_control_settings[0]:
        return
    try:
        text = str(msg) % args if args else str(msg)
    except (TypeError, ValueError):
        text = f"{msg} {args!r}"
    structlog.get_logger("thespian").log(level, text, logger="thespian")


def log_straight_to_stream() -> None:
    """Send every process's log records straight to its own handlers, never to the logger process.

    Why: 4.0.1 replaces the root logger of every actor with a forwarder that pickles each record
    to a logger process (~2 ms per event), and ``thesplog`` appends to ``$TMPDIR/thespian.log``.
    How: the forwarder factory returns a plain root logger carrying the inherited handlers
    (shelldon's JSON lines on stdout), and ``thesplog`` is re-pointed at structlog in every
    loaded Thespian module. The logger process still starts (the Admin waits for it) but idles.
    Upstream: a ``logDefs`` mode meaning "log locally in each process".
    """
    from thespian.system import multiprocCommon, utilis

    multiprocCommon.ThespianLogForwarder = _direct_root_logger
    original = utilis.thesplog
    for name, module in list(sys.modules.items()):
        if name.startswith("thespian") and getattr(module, "thesplog", None) is original:
            module.thesplog = _thesplog_to_structlog  # type: ignore[attr-defined]


def remember_admin_process() -> None:
    """Keep the Admin's process object, which Thespian detaches without ever joining it.

    Why: without a join the Admin becomes a zombie of the starter when it exits, and the starter
    loses its only handle on the Admin (whose pid is also the session id of every process of the
    system). How: wrap ``detach_child`` to remember the ``ThespianAdmin`` process; the starter
    takes it with ``take_admin_process`` and reaps it on stop. Upstream: keep and join it.
    """
    from thespian.system import multiprocCommon

    detach_child = multiprocCommon.detach_child

    def remembering_detach_child(childref: Any) -> None:
        detach_child(childref)
        if getattr(childref, "name", "") == "ThespianAdmin":
            _admin_processes.append(childref)

    multiprocCommon.detach_child = remembering_detach_child


def take_admin_process() -> Any | None:
    """The ``multiprocessing.Process`` of the Admin this process started last, if any."""
    if not _admin_processes:
        return None
    admin = _admin_processes.pop()
    _admin_processes.clear()
    return admin


_PATCHES: tuple[Callable[[], None], ...] = (
    bind_loopback_only,
    refuse_untrusted_pickles,
    create_only_trusted_actors,
    fix_logger_restart,
    guard_process_start,
    log_straight_to_stream,
    remember_admin_process,
)


def harden_thespian() -> tuple[str, ...]:
    """Apply every patch once (idempotent); return the names applied so far."""
    # Import every base first so log_straight_to_stream reaches each module's thesplog.
    from thespian.system import (  # noqa: F401
        multiprocQueueBase,
        multiprocTCPBase,
        multiprocUDPBase,
        systemAdmin,
    )

    for patch in _PATCHES:
        if patch.__name__ not in _applied:
            patch()
            _applied.append(patch.__name__)
    return tuple(_applied)
