"""The one owner-approved RISKY call of a resumed turn runs in its own confined child.

A resumed worker starts only part-way confined (the syscall deny list, its cgroup) so that the
approved call can get what it needs. The call runs in a ``Child`` (in the worker's group, dying
with it) confined as the parent prepared (``sandbox.prepare_call``: the workspace read-write,
system files read-only, never the vault, the database, the credentials, the toolbox or the
parents' ``/proc``), with a private temp dir removed afterwards (``TMPDIR``: where a fresh
``HOME`` for its programs goes). Only calls that need the network keep it (``needs_network``);
every other one gets the socket filter too. The child answers one ``ToolResult`` on a pipe,
decoded with the validating codec; then the worker closes its own confinement and the loop
goes on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import NoReturn

import structlog

from shelldon.contracts import ContractError, ToolCall, ToolResult, decode, encode
from shelldon.proc import sandbox
from shelldon.proc.child import Child, SpawnError
from shelldon.proc.output import Output, write_all
from shelldon.proc.ties import die_with_parent
from shelldon.worker.tools import Registry
from shelldon.worker.tools.registry import execute_tool

log = structlog.get_logger(__name__)


def needs_network(registry: Registry, call: ToolCall) -> bool:
    """Whether the approved ``call`` runs with the network: its tool says so for these
    arguments (``ToolSpec.network``: ``http_get``, ``run_shell``, ``git`` fetch/pull/push)."""
    spec = registry.specs.get(call.name)
    return spec is not None and spec.network is not None and bool(spec.network(call.args))


def run_approved(
    registry: Registry, call: ToolCall, confinement: sandbox.Confinement
) -> ToolResult:
    """Run the approved ``call`` in a confined child; its result, or a failed one saying why."""
    private = Path(tempfile.mkdtemp(prefix="shelldon-call-"))
    reply_r, reply_w = os.pipe2(os.O_CLOEXEC)
    network = needs_network(registry, call)
    c = sandbox.with_private_dir(confinement, private)
    parent = os.getpid()
    try:
        child = Child.fork(
            lambda: _child_main(registry, call, c, network, private, reply_w, parent),
            own_group=False,
        )
    except SpawnError as exc:
        os.close(reply_r)
        os.close(reply_w)
        shutil.rmtree(private, ignore_errors=True)
        return ToolResult(call.id, False, f"{call.name} could not be started: {exc}")
    os.close(reply_w)
    reply = Output(reply_r, 4 * registry.context.max_output_chars + 4096)
    # No deadline of its own: the turn's ceiling holds outside (the worker's group is killed,
    # this child with it).
    try:
        with child:
            child.pump((reply,), until_full=reply)
            if reply.truncated:  # never waited for: it may be blocked writing the rest
                child.kill()
            code = child.reap(block=True)
    finally:
        reply.close()
        shutil.rmtree(private, ignore_errors=True)
    log.info("approved_call_ran", tool=call.name, network=network, exit_code=code)
    try:
        result = decode(reply.data()) if reply.data() and not reply.truncated else None
    except ContractError:
        result = None
    if isinstance(result, ToolResult) and result.id == call.id:
        return result
    return ToolResult(call.id, False, f"{call.name} ended without a result (exit code {code})")


def _child_main(
    registry: Registry,
    call: ToolCall,
    c: sandbox.Confinement,
    network: bool,
    private: Path,
    reply_w: int,
    parent: int,
) -> NoReturn:  # pragma: no cover - the child; covered by the parent's assertions
    code = 1
    try:
        die_with_parent(parent, 1)
        # Temp files (and a fresh HOME for the call's programs) go to its private dir.
        os.environ["TMPDIR"] = str(private)
        tempfile.tempdir = None
        sandbox.confine_call(c, network=network)
        result = execute_tool(registry, call, approved=True)
        write_all(reply_w, encode(result))
        code = 0
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            log.error("approved_call_crashed", tool=call.name, error=f"{type(exc).__name__}: {exc}")
    finally:
        os._exit(code)
