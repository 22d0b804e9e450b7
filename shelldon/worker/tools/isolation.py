"""A self-coded tool call runs in a child of the worker, never in the worker itself.

The worker holds what a tool must not touch: the channel to the service (a tool there could
forge a ``ToolStarted`` naming another tool, a Job, a Result with a parked approval), the
loop's state, its stdout (the service log), and the confinement code a resumed worker still
has to run. The child stays in the worker's process group (whoever kills the worker kills it)
and dies with it (``PR_SET_PDEATHSIG``). Before the tool's code loads, it keeps no descriptor
but its reply pipe and one capped pipe for stdout and stderr; it answers with one msgpack map,
``{"ok": True, "text"}`` or ``{"ok": False, "error"}``.

The worker treats every byte that comes back as hostile (the tool shares that child with the
code that writes the reply): the reply is read within a cap and must decode to exactly that
shape, else the call failed. What the tool printed is logged as one escaped value of the
worker's own ``tool_output`` event, never as lines of the log. Anything the tool changes in its
process — globals, patched functions, signal handlers — dies with the child.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import msgpack
import structlog

from shelldon.proc import sandbox
from shelldon.proc.child import Child, SpawnError
from shelldon.proc.output import Output, write_all
from shelldon.proc.ties import die_with_parent

log = structlog.get_logger(__name__)

PRINT_CAP = 4096
"""Bytes of what a tool printed that reach the log (the rest is counted, not kept)."""


class IsolatedToolError(Exception):
    """A self-coded call failed in its child: it raised (the text says what, as
    ``Type: message``), broke the convention, sent garbage, or died. A strike."""


def run_isolated(
    load: Callable[[], Any], name: str, args: dict[str, Any], max_output_chars: int
) -> str:
    """Call ``load().run(**args)`` in a child and return its text; raises
    ``IsolatedToolError`` for every failure (``load`` raising included)."""
    reply_r, reply_w = os.pipe2(os.O_CLOEXEC)
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    parent = os.getpid()
    try:
        child = Child.fork(lambda: _child_main(load, args, reply_w, out_w, parent), own_group=False)
    except SpawnError as exc:
        for fd in (reply_r, reply_w, out_r, out_w):
            os.close(fd)
        raise IsolatedToolError(f"{name} could not be started: {exc}") from None
    os.close(reply_w)
    os.close(out_w)
    # 4 bytes a character at most, plus the map around it.
    reply = Output(reply_r, 4 * max_output_chars + 1024)
    printed = Output(out_r, PRINT_CAP)
    with child:  # killed, reaped and released however this block is left
        # No deadline of its own: the turn's ceiling holds outside (the worker's group is
        # killed, this child with it).
        child.pump((reply, printed), until_full=reply)
        if reply.truncated:
            child.kill()
        code = child.reap(block=True)
    if printed.head:
        log.info(
            "tool_output",
            tool=name,
            output=bytes(printed.head).decode("utf-8", "replace"),
            dropped=printed.dropped,
        )
    if reply.truncated:
        raise IsolatedToolError(f"{name} returned more than {max_output_chars} characters")
    return _decode(name, reply.data(), code)


def _decode(name: str, data: bytes, code: int | None) -> str:
    if not data:
        raise IsolatedToolError(f"{name}'s process ended without an answer ({_death(code)})")
    try:
        reply = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException):
        reply = None
    if isinstance(reply, dict) and reply.get("ok") is True and set(reply) == {"ok", "text"}:
        text = reply["text"]
        if isinstance(text, str):
            return text
    elif isinstance(reply, dict) and reply.get("ok") is False and set(reply) == {"ok", "error"}:
        error = reply["error"]
        if isinstance(error, str):
            raise IsolatedToolError(error)
    raise IsolatedToolError(f"{name}'s process sent a malformed answer")


def _death(code: int | None) -> str:
    if code is None or code >= 0:
        return f"exit code {code}"
    return f"killed by signal {-code}"


def _child_main(
    load: Callable[[], Any], args: dict[str, Any], reply_w: int, out_w: int, parent: int
) -> NoReturn:  # pragma: no cover - the child; covered by the parent's assertions
    code = 1
    try:
        die_with_parent(parent, 1)
        # The reply pipe goes to 3 first: the pipes may already sit on 3 and 4 (a worker holds
        # few descriptors), and dup2 onto itself is a no-op, dup3 an error.
        reply = 3
        if reply_w != reply:
            if out_w == reply:
                out_w = os.dup(out_w)
            os.dup2(reply_w, reply)
        answer: dict[str, Any] | None = None
        try:
            # No capability (the namespace layer grants them all in its user namespace): with
            # the worker not dumpable, nothing of the worker's /proc/<pid> opens for the tool.
            sandbox.drop_capabilities()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.closerange(reply + 1, max(os.sysconf("SC_OPEN_MAX"), 4))
            # The worker's stream objects may hold its buffered log lines: new ones, over the pipe.
            sys.stdout = open(1, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
            sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115
        except BaseException as exc:
            answer = {"ok": False, "error": f"its process could not be prepared: {exc}"}
        if answer is None:
            try:
                result = load().run(**args)
                answer = {"ok": True, "text": result if isinstance(result, str) else str(result)}
            except BaseException as exc:  # a self-coded tool may raise anything, even exit
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            for stream in (sys.stdout, sys.stderr):  # what it printed goes before the answer
                with contextlib.suppress(Exception):  # a tool may have closed or replaced it
                    stream.flush()
        write_all(reply, msgpack.packb(answer))
        code = 0
    finally:
        os._exit(code)
