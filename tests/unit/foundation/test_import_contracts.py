"""Invariant 1: import-linter keeps core LLM-free — and it really fails when someone breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
LINT = Path(sys.executable).parent / "lint-imports"


def copy_project(dst: Path) -> Path:
    for name in ("shelldon", "actors"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", dst / "pyproject.toml")
    return dst


def lint(project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT), "--no-cache"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(project)},
    )


@pytest.mark.slow
def test_the_layers_hold_on_the_real_tree(tmp_path: Path) -> None:
    result = lint(copy_project(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("shelldon/store/__init__.py", "import anthropic", "stay LLM-free"),
        ("shelldon/rules/arbiter.py", "import shelldon.worker", "stay LLM-free"),
        ("shelldon/rules/arbiter.py", "import sqlite3", "touch nothing of the OS"),
        ("shelldon/rules/risky.py", "import subprocess", "touch nothing of the OS"),
        ("shelldon/rules/turnwatch.py", "import shelldon.proc.limits", "touch nothing of the OS"),
        ("shelldon/rules/inbox_plan.py", "import actors.messages", "touch nothing of the OS"),
        ("shelldon/rules/promotion.py", "import shelldon.toolbox.toolbox", "nothing of the OS"),
        ("shelldon/worker/loop.py", "import shelldon.rules.risky", "Workers import no rules"),
        ("shelldon/proc/limits.py", "import shelldon.broker", "stay LLM-free"),
        ("shelldon/worker/tools/registry.py", "import anthropic", "worker imports no LLM SDK"),
        ("shelldon/contracts/codec.py", "import shelldon.config", "Contracts import nothing"),
    ],
)
def test_a_forbidden_import_breaks_the_build(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    project = copy_project(tmp_path)
    target = project / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    result = lint(project)
    assert result.returncode != 0
    assert contract in result.stdout
    assert "BROKEN" in result.stdout
