"""Structured logs: every process writes one JSON object per line with ``ts``, ``level``,
``event``, and bound context (``actor``, ``turn_id``) — straight to its own stdout, no hop
through a logger process. Settings come from ``logging.yaml`` (see ``find_logging_config``).
Records from the standard ``logging`` module (Thespian, aiohttp) are rendered the same way.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import structlog

_DEFAULTS: dict[str, Any] = {"level": "info", "stream": "stdout", "loggers": {}}


def find_logging_config(home: Path | None = None) -> Path | None:
    """``$SHELLDON_LOGGING``, else ``<home>/logging.yaml``, else the source checkout's, else the
    installed copy under ``<prefix>/share/shelldon``; None when there is none."""
    candidates = []
    if os.environ.get("SHELLDON_LOGGING"):
        candidates.append(Path(os.environ["SHELLDON_LOGGING"]))
    if home is not None:
        candidates.append(home / "logging.yaml")
    candidates.append(Path(__file__).resolve().parent.parent / "logging.yaml")
    candidates.append(Path(sys.prefix) / "share" / "shelldon" / "logging.yaml")
    return next((p for p in candidates if p.is_file()), None)


def read_logging_config(path: Path | None) -> dict[str, Any]:
    """The logging settings from ``path`` merged over the defaults."""
    config = dict(_DEFAULTS)
    if path is None:
        return config
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"logging config {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"logging config {path}: must be a mapping")
    config.update(data)
    return config


def _level(name: Any) -> int:
    value = logging.getLevelName(str(name).upper())
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {name!r}")
    return value


def _std_stream(fd: int) -> TextIO:
    """A line-buffered text stream on descriptor ``fd`` itself. Not ``sys.stdout``: a test
    runner may swap that for a file on another descriptor, which a forked worker closes."""
    return open(fd, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)


def configure_logging(
    *, actor: str | None = None, home: Path | None = None, stream: TextIO | None = None
) -> None:
    """Set up JSON-lines logging for this process and bind ``actor`` to every event."""
    config = read_logging_config(find_logging_config(home))
    out = stream or _std_stream(2 if config.get("stream") == "stderr" else 1)
    level = _level(config.get("level", "info"))
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name, lvl in (config.get("loggers") or {}).items():
        logging.getLogger(str(name)).setLevel(_level(lvl))
    structlog.contextvars.clear_contextvars()
    if actor is not None:
        structlog.contextvars.bind_contextvars(actor=actor)
