"""Model code cannot reach anything on the machine over TCP. The service itself listens on no
port (every actor in one process: tests/integration/runtime/test_inprocess.py); inside the running
service a self-coded tool in a worker and a model-written test in a gate run try ports that do
listen on loopback (stand-ins for any local service) and each connection is refused."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from shelldon.config import load_settings
from tests.integration.runtime.harness import Service

from .probe import ATTACKS, promote

pytestmark = pytest.mark.slow

PORT_PROBE = (
    ATTACKS
    + """

DESCRIPTION = "Try to connect to every port listed in ports.json; write what happened."
PARAMS_SCHEMA = {"type": "object", "properties": {"where": {"type": "string"}}}


def run(where):
    with open(where + "/ports.json") as fh:
        ports = json.load(fh)
    got = {str(port): _try(lambda port=port: _connect(port)) for port in ports}
    with open(where + "/tried.json", "w") as fh:
        json.dump(got, fh)
    return json.dumps(got)
"""
)


def gate_test(ports: list[int]) -> str:
    # The gate may read and write only its own staging dir (its cwd): the port list goes there.
    return (
        "import json\n\nfrom port_gate import run\n\n\n"
        "def test_no_local_port_answers():\n"
        f"    with open('ports.json', 'w') as fh:\n        json.dump({ports!r}, fh)\n"
        "    got = json.loads(run(where='.'))\n"
        "    assert got and set(got.values()) == {'EPERM'}, got\n"
    )


def script(workspace: Path, ports: list[int]) -> list[dict[str, Any]]:
    return [
        {
            "when": "probe",
            "tool_calls": [{"name": "port_probe", "args": {"where": str(workspace)}}],
        },
        {"when": "probe", "text": "Probed."},
        {
            "when": "gate",
            "tool_calls": [
                {
                    "name": "propose_tool",
                    "args": {"name": "port_gate", "code": PORT_PROBE, "test": gate_test(ports)},
                }
            ],
        },
        {"when": "gate", "text": "Proposed."},
    ]


@pytest.mark.parametrize("layer", ["landlock", "userns"])
def test_no_service_port_is_reachable_from_a_worker_or_a_gate(tmp_path: Path, layer: str) -> None:
    home = tmp_path / "home"
    settings = load_settings(environ={"SHELLDON_HOME": str(home)})
    settings.workspace.mkdir(parents=True)
    promote(settings, "port_probe", PORT_PROBE)
    listeners = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    ports = sorted(sock.getsockname()[1] for sock in listeners)
    svc = Service(home, script(settings.workspace, ports), SHELLDON_SANDBOX_FS=layer)
    try:
        (settings.workspace / "ports.json").write_text(json.dumps(ports))

        svc.say("probe")
        svc.expect("Probed.")
        tried = json.loads((settings.workspace / "tried.json").read_text())
        assert tried == {str(p): "EPERM" for p in ports}

        svc.say("gate")
        chunk = svc.expect("[y/N]", timeout=30)
        assert "port_gate" in chunk and "passed" in chunk
    finally:
        svc.stop()
        for sock in listeners:
            sock.close()
