"""When model-written code may run at all: only where a filesystem layer confines it.

A self-coded tool, or the test the gate runs for a proposed one, is hostile code. Without
Landlock or the user + mount namespace (``[sandbox] mode = off``, or a kernel with neither) the
path jail is all that stands between it and the vault, the database, the toolbox and
``/proc/<service>/mem``, and the jail only guards the built-in tools. There, self-coded tools are
neither gated, nor discovered, nor run; the owner (``/tools``, the refusal of a proposal) and
``shelldon doctor`` are told why.
"""

from __future__ import annotations

from shelldon.config import SandboxSettings
from shelldon.proc import sandbox


def selfcoded_refusal(settings: SandboxSettings) -> str:
    """Why self-coded tools are off under ``settings`` on this machine ("" when they are on)."""
    p = sandbox.plan(settings)
    if p.mode == "off":
        return (
            "self-coded tools are off: [sandbox] mode = off confines nothing, and model-written "
            "code must never run unconfined; set [sandbox] mode = best-effort to use them"
        )
    if p.fs == "none":
        forced = settings.fs == "none"
        return "self-coded tools are off: no filesystem layer confines them " + (
            "([sandbox] fs = none forces it off)"
            if forced
            else "(this kernel has neither Landlock nor unprivileged user namespaces: "
            "enable one, e.g. sysctl kernel.unprivileged_userns_clone=1)"
        )
    return ""
