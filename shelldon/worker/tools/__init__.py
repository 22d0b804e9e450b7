"""Tool registry, ``execute_tool`` and ``build_registry``: built-ins plus live self-coded tools."""

from __future__ import annotations

from shelldon.config import Settings
from shelldon.toolbox.policy import selfcoded_refusal
from shelldon.worker.tools import clock, files, git, http, pyeval, selfcoded, shell, write
from shelldon.worker.tools.registry import (
    Registry,
    ToolContext,
    ToolError,
    ToolSpec,
    cap_output,
    execute_tool,
)

__all__ = [
    "Registry",
    "ToolContext",
    "ToolError",
    "ToolSpec",
    "build_registry",
    "cap_output",
    "context_from_settings",
    "execute_tool",
]


def context_from_settings(settings: Settings) -> ToolContext:
    """The ToolContext a turn's tools run with."""
    lim = settings.limits
    return ToolContext(
        workspace=settings.workspace,
        vault=settings.vault,
        max_output_chars=lim.max_tool_output_chars,
        eval_timeout_s=lim.eval_timeout_s,
        shell_timeout_s=lim.shell_timeout_s,
        rlimit_as_mb=lim.rlimit_as_mb,
        rlimit_cpu_s=lim.rlimit_cpu_s,
        live_tools=settings.live_tools,
        selfcoded_off=selfcoded_refusal(settings.sandbox),
    )


def build_registry(settings: Settings, discovery: selfcoded.Discovery | None = None) -> Registry:
    """Every tool a turn may call: the built-in families, then the live self-coded tools
    (``discovery``: the zygote's, which remembers its last result)."""
    registry = Registry(context_from_settings(settings))
    # Built-in families, FREE first; RISKY families and self-coded discovery follow.
    for family in (clock, files, pyeval, write, shell, http, git):
        registry.add_all(family.specs())
    # Self-coded tools last: a name collision with a built-in is refused (built-ins win).
    registry.add_all(selfcoded.discover(registry.context, discovery))
    return registry
