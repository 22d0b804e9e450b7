"""What the service side knows about a RISKY call, whatever the worker says about it: only a
RISKY built-in's call can be parked, and the owner is asked in words built from the call's
name and arguments (``shelldon.replies.describe_call``), never from the worker's summary.
"""

from __future__ import annotations

from shelldon.contracts import ToolCall
from shelldon.replies import describe_call

RISKY_BUILTINS = frozenset({"run_shell", "git", "http_get", "write_file"})
"""The built-in tools that wait for the owner's tap (the worker's registry marks the same
four RISKY; a test holds the two together)."""


def park_refusal(call: ToolCall) -> str:
    """Why ``call`` may not be parked for the owner ("" when it may): it must be a call of a
    RISKY built-in whose arguments parsed. A self-coded tool is FREE and never asks; a worker
    asking for one is asking to run code the owner never approved with the network on."""
    if call.name not in RISKY_BUILTINS:
        return f"{call.name!r} is not a RISKY built-in tool"
    if call.args_error:
        return f"its arguments did not parse ({call.args_error})"
    return ""


def refused_park_text(call: ToolCall, why: str) -> str:
    """What the owner is told when a worker asked to park a call that may not be parked."""
    return (
        f"I was asked to get your approval for {describe_call(call)}, but {why}: "
        "I refused, and nothing will run."
    )
