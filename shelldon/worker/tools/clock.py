"""FREE tool ``get_time``: the current local date and time, ISO-8601 with the UTC offset."""

from __future__ import annotations

from datetime import datetime

from shelldon.contracts import Tier, ToolDefinition
from shelldon.worker.tools.registry import ToolContext, ToolSpec


def get_time(ctx: ToolContext) -> str:
    """Local time now, e.g. ``2026-11-29T09:41:07+01:00``."""
    return datetime.now().astimezone().isoformat(timespec="seconds")


def specs() -> list[ToolSpec]:
    """The FREE clock tool."""
    return [
        ToolSpec(
            ToolDefinition(
                name="get_time",
                description="The current local date and time as ISO-8601 with the UTC offset.",
                params_schema={"type": "object", "properties": {}, "additionalProperties": False},
                tier=Tier.FREE,
            ),
            get_time,
        )
    ]
