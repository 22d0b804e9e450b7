"""The gate's pytest plugin: counts test outcomes, and whether a passing test called the tool's
module-level ``run`` (watched with ``sys.setprofile``).

It runs inside the gate's pytest process (the model's test), never in shelldon's: the gate
copies this file into the run's private directory as ``_shelldon_gate_probe.py`` and loads it
with ``-p``. So it imports nothing of shelldon — only the standard library and pytest — and
reads where the tool is and where to write its report from the environment. A hostile test can
forge what it writes (the probe runs in the process it observes): the gate catches mistakes;
the owner's review of the code is the safety boundary.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Generator
from types import FrameType
from typing import Any

import pytest

_TOOL = os.path.realpath(os.environ.get("SHELLDON_GATE_TOOL", ""))
_REPORT = os.environ.get("SHELLDON_GATE_REPORT", "")
_files: dict[str, bool] = {}
_called = [False]
_counts = {
    "collected": 0,
    "collect_errors": 0,
    "passed": 0,
    "failed": 0,
    "skipped": 0,
    "passed_calling_run": 0,
}


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event == "call":
        code = frame.f_code
        if code.co_qualname == "run":
            hit = _files.get(code.co_filename)
            if hit is None:
                hit = _files[code.co_filename] = os.path.realpath(code.co_filename) == _TOOL
            if hit:
                _called[0] = True


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _counts["collect_errors"] += 1


def pytest_collection_finish(session: pytest.Session) -> None:
    _counts["collected"] = len(session.items)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, Any, Any]:
    _called[0] = False
    sys.setprofile(_profile)
    threading.setprofile(_profile)
    try:
        return (yield)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        _counts["failed"] += 1
    elif report.skipped and report.when in ("setup", "call"):
        _counts["skipped"] += 1
    elif report.when == "call" and report.passed:
        _counts["passed"] += 1
        if _called[0]:
            _counts["passed_calling_run"] += 1


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _counts["exitstatus"] = int(exitstatus)
    tmp = _REPORT + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(_counts, fh)
    os.replace(tmp, _REPORT)
