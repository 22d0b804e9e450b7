"""Build toolbox archives by hand, well-formed or hostile, and run ``shelldon tools`` for real."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from shelldon.toolbox.manifest import code_hash
from tests.unit.selfcode.samples import ADDER, ADDER_TEST


def manifest_entry(name: str, code: str, has_test: bool = True) -> dict[str, object]:
    """The toolbox.json entry ``shelldon tools export`` would write for ``code``."""
    return {
        "name": name,
        "description": "A tool.",
        "params_schema": {"type": "object", "properties": {}},
        "code_hash": code_hash(code),
        "has_test": has_test,
    }


def toolbox_json(*entries: dict[str, object]) -> bytes:
    """A toolbox.json listing ``entries``."""
    return json.dumps({"format": 1, "tools": list(entries)}).encode()


def regular(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    """A regular-file member."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def write_tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    """Write ``members`` (header, data) to a tar.gz at ``path`` exactly as given."""
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def toolbox(path: Path, tools: dict[str, tuple[str, str]]) -> Path:
    """A well-formed archive of ``tools`` (name -> (code, test); an empty test is left out)."""
    entries = [manifest_entry(n, code, bool(test)) for n, (code, test) in tools.items()]
    members = [regular("toolbox.json", toolbox_json(*entries))]
    for name, (code, test) in tools.items():
        members.append(regular(f"tools/{name}.py", code.encode()))
        if test:
            members.append(regular(f"tests/test_{name}.py", test.encode()))
    return write_tar(path, members)


def adder_members() -> list[tuple[tarfile.TarInfo, bytes]]:
    """The members of a well-formed archive holding the adder tool and its test."""
    return [
        regular("toolbox.json", toolbox_json(manifest_entry("adder", ADDER))),
        regular("tools/adder.py", ADDER.encode()),
        regular("tests/test_adder.py", ADDER_TEST.encode()),
    ]


def shelldon(
    home: Path, *args: str, stdin: str = "", config: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m shelldon ARGS`` as the owner would, with ``SHELLDON_HOME=home``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELLDON_")}
    env["SHELLDON_HOME"] = str(home)
    if config is not None:
        env["SHELLDON_CONFIG"] = str(config)
    return subprocess.run(
        [sys.executable, "-m", "shelldon", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
