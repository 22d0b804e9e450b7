"""Logs: one JSON object per line on stdout, with ts, level, event and bound context."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path


def run_logging(code: str, env_extra: dict[str, str] | None = None) -> list[dict]:
    env = {"PATH": os.environ["PATH"], **(env_extra or {})}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_every_line_is_json_with_the_required_fields() -> None:
    lines = run_logging("""
        import logging, structlog
        from shelldon.logs import configure_logging
        configure_logging(actor="ArbiterActor")
        log = structlog.get_logger("t")
        log.info("turn_started", chat_id=5)
        with structlog.contextvars.bound_contextvars(turn_id="turn-1"):  # as ContractActor does
            log.warning("tool_raised", tool="weather", error="boom\\nwith newline")
        logging.getLogger("thespian").warning("thespian says %s", "hi")
        logging.getLogger("thespian").info("below thespian's level")
        try:
            1 / 0
        except ZeroDivisionError:
            log.exception("crashed")
    """)
    assert len(lines) == 4
    for line in lines:
        assert {"ts", "level", "event", "actor"} <= line.keys()
        assert line["actor"] == "ArbiterActor"
    assert lines[0]["event"] == "turn_started" and lines[0]["chat_id"] == 5
    assert "turn_id" not in lines[0]
    assert lines[1]["turn_id"] == "turn-1" and lines[1]["level"] == "warning"
    assert lines[2]["event"] == "thespian says hi" and lines[2]["logger"] == "thespian"
    assert lines[3]["level"] == "error" and "ZeroDivisionError" in lines[3]["exception"]


def test_level_from_logging_yaml_filters(tmp_path: Path) -> None:
    cfg = tmp_path / "logging.yaml"
    cfg.write_text("level: warning\n")
    lines = run_logging(
        """
        import structlog
        from shelldon.logs import configure_logging
        configure_logging(actor="a")
        structlog.get_logger().info("quiet")
        structlog.get_logger().warning("loud")
    """,
        {"SHELLDON_LOGGING": str(cfg)},
    )
    assert [line["event"] for line in lines] == ["loud"]


def test_the_root_logging_yaml_is_valid() -> None:
    from shelldon.logs import find_logging_config, read_logging_config

    path = find_logging_config()
    assert path is not None and path.name == "logging.yaml"
    config = read_logging_config(path)
    assert config["level"] == "info"
    assert config["loggers"]["httpx"] == "warning"
