"""systemd's ``Delegate=yes`` path: a service whose own cgroup is delegated to it (marked with the
``trusted.delegate`` xattr, as systemd does) moves itself into a leaf, enables the memory and
pids controllers it has, and puts every turn's cgroup under ``<cgroup>/turns``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shelldon.config import SandboxSettings
from shelldon.proc import sandbox


def in_child_of(cgroup: Path) -> dict[str, Any]:
    """Run the start-up steps in a fork that lives in ``cgroup`` (as the service would)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        report: dict[str, Any] = {}
        try:
            (cgroup / "cgroup.procs").write_text("0")
            report["delegated"] = str(sandbox.delegated_cgroup())
            report["turns"] = str(sandbox.prepare_delegated_cgroup())
            report["leaf_procs"] = (cgroup / "service" / "cgroup.procs").read_text().split()
            report["me"] = str(os.getpid())
            report["parent"] = str(sandbox.cgroup_parent(SandboxSettings()))
            group = sandbox.open_turn_cgroup(SandboxSettings(), "turn-1")
            report["turn"] = str(group.path) if group else None
            if group is not None:
                group.close()
        except BaseException as exc:
            report["error"] = repr(exc)
        os.write(write_end, json.dumps(report).encode())
        os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 65536):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    result = json.loads(data)
    assert isinstance(result, dict)
    return result


def test_delegated_cgroup_is_found_and_turns_go_under_it(test_cgroup: Path) -> None:
    os.setxattr(test_cgroup, "trusted.delegate", b"1")
    report = in_child_of(test_cgroup)
    assert "error" not in report, report
    assert report["delegated"] == str(test_cgroup)
    assert report["turns"] == str(test_cgroup / "turns")
    assert report["me"] in report["leaf_procs"]  # the service left the delegated root
    assert report["parent"] == str(test_cgroup / "turns")
    assert report["turn"] == str(test_cgroup / "turns" / "turn-1")
    assert not (test_cgroup / "turns" / "turn-1").exists()


def test_an_undelegated_cgroup_is_left_alone(test_cgroup: Path) -> None:
    # Root may write anywhere, so ownership alone does not count: only the systemd marker does.
    report = in_child_of(test_cgroup)
    assert report["delegated"] == "None" and report["turns"] == "None"
    assert not (test_cgroup / "turns").exists()
