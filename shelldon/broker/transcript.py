"""Pairing of tool calls with their results, the rule every tool-calling API enforces.

Anthropic and OpenAI both reject a conversation in which an assistant's tool call is not
answered right after it, or a tool result answers no call of the assistant message just before
it. Trimmed history or a parked turn can produce either, so before any wire format is built the
transcript is repaired here, once, for every adapter: an unanswered call gets an error result,
a result that answers nothing (or answers a call twice) is dropped.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from shelldon.contracts import Message, Role

log = structlog.get_logger(__name__)

UNANSWERED = "no result: this tool call was not run"
"""The error result given to a tool call that has none in the transcript."""


def pair_tool_results(messages: Sequence[Message]) -> tuple[Message, ...]:
    """``messages`` with each assistant message's tool calls answered exactly once by the TOOL
    messages that directly follow it, in the order the results came."""
    out: list[Message] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        i += 1
        if msg.role is Role.TOOL:
            log.warning("transcript.orphan_result_dropped", tool_call_id=msg.tool_call_id)
            continue
        out.append(msg)
        if msg.role is not Role.ASSISTANT or not msg.tool_calls:
            continue
        wanted = [call.id for call in msg.tool_calls]
        answered: set[str] = set()
        while i < len(messages) and messages[i].role is Role.TOOL:
            result = messages[i]
            i += 1
            if result.tool_call_id in wanted and result.tool_call_id not in answered:
                answered.add(result.tool_call_id)
                out.append(result)
            else:
                log.warning("transcript.orphan_result_dropped", tool_call_id=result.tool_call_id)
        for call_id in wanted:
            if call_id not in answered:
                answered.add(call_id)
                out.append(Message(Role.TOOL, UNANSWERED, tool_call_id=call_id, is_error=True))
    return tuple(out)
