"""The refusals of the toolbox: each message says why and what to do instead."""

from __future__ import annotations


class ToolboxError(ValueError):
    """A self-coding step was refused; the message says why and what to do instead."""


class StemError(ToolboxError):
    """A proposed tool name cannot become a module stem."""
