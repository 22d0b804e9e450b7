"""The ops block: how a model's final text asks the service to remember, schedule or gate a tool.

A reply may carry fenced blocks opened with three backticks and the word ``ops``; each
non-empty line inside is one JSON object: ``remember`` (``fact``), ``schedule`` (``prompt``, and
``at`` in epoch seconds or ``in_s``) or ``propose_tool`` (``name``, ``code``, ``test``, optional
``replaces``); ``prompt.OPS_RULE`` shows the model examples. ``parse_ops`` strips every block
from the owner's reply and returns the valid lines as contracts. A malformed line is skipped,
logged and listed in ``problems``; it never fails the turn and never leaks into the reply.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from shelldon.contracts import Op, ProposeTool, Remember, Schedule

log = structlog.get_logger(__name__)

# An ops fence runs to its closing fence, or to the end of the text when the model was cut off.
_BLOCK = re.compile(
    r"^[ \t]*```[ \t]*ops[ \t]*(?:\n|\Z)(?P<body>.*?)(?:^[ \t]*```[ \t]*(?:\n|\Z)|\Z)", re.M | re.S
)
_BLANK_RUNS = re.compile(r"\n{3,}")


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """A final text split into what the owner reads, the ops for the service, and skipped lines."""

    reply: str
    ops: tuple[Op, ...]
    problems: tuple[str, ...]


class _BadOp(ValueError):
    """One ops line that cannot become a contract; the message says why."""


def _text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _BadOp(f"{key!r} must be a non-empty string")
    return value


def _number(obj: dict[str, Any], key: str) -> float:
    value = obj.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _BadOp(f"{key!r} must be a finite number, got {value!r}")
    return float(value)


def _schedule(obj: dict[str, Any], now: float) -> Schedule:
    prompt = _text(obj, "prompt")
    if ("at" in obj) == ("in_s" in obj):
        raise _BadOp("schedule needs exactly one of 'at' (epoch seconds) or 'in_s' (seconds)")
    if "at" in obj:
        at = _number(obj, "at")
        if at <= 0:
            raise _BadOp(f"'at' must be epoch seconds, got {at!r}")
        return Schedule(at=at, prompt=prompt)
    in_s = _number(obj, "in_s")
    if in_s < 0:
        raise _BadOp(f"'in_s' must not be negative, got {in_s!r}")
    return Schedule(at=now + in_s, prompt=prompt)


def _op_from_line(line: str, now: float) -> Op:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise _BadOp(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise _BadOp(f"expected a JSON object, got {type(obj).__name__}")
    kind = obj.get("op")
    if kind == "remember":
        return Remember(fact=_text(obj, "fact").strip())
    if kind == "schedule":
        return _schedule(obj, now)
    if kind == "propose_tool":
        replaces = obj.get("replaces", "")
        if not isinstance(replaces, str):
            raise _BadOp(f"'replaces' must be a tool's name, got {replaces!r}")
        return ProposeTool(
            name=_text(obj, "name"),
            code=_text(obj, "code"),
            test=_text(obj, "test"),
            replaces=replaces.strip(),
        )
    raise _BadOp(f"unknown op {kind!r} (known: remember, schedule, propose_tool)")


def parse_ops(text: str, *, clock: Callable[[], float] = time.time) -> ParsedReply:
    """Split ``text`` into the owner's reply and its ops; ``clock`` turns ``in_s`` into ``at``."""
    ops: list[Op] = []
    problems: list[str] = []
    now = clock()
    for index, block in enumerate(_BLOCK.finditer(text), start=1):
        for number, raw in enumerate(block.group("body").splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            try:
                ops.append(_op_from_line(line, now))
            except _BadOp as exc:
                problem = f"ops block {index}, line {number}: {exc}"
                log.warning("ops_line_skipped", problem=problem)
                problems.append(problem)
    reply = _BLANK_RUNS.sub("\n\n", _BLOCK.sub("", text)).strip()
    return ParsedReply(reply=reply, ops=tuple(ops), problems=tuple(problems))
