"""Interpreters set up the way a broken install would be, for tests of what the owner is told."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest


def python_without_pytest(tmp_path: Path, module: str) -> list[str]:
    """Run ``module`` with this interpreter and every installed package but pytest: ``python
    -S`` on a directory of links to site-packages' entries less pytest's, plus the checkout."""
    site = Path(pytest.__file__).resolve().parents[1]
    farm = tmp_path / "site-without-pytest"
    farm.mkdir(exist_ok=True)
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("pytest", "_pytest", "py.py")) or name.endswith(".pth"):
            continue
        with contextlib.suppress(FileExistsError):
            (farm / entry.name).symlink_to(entry)
    repo = Path(__file__).resolve().parents[1]
    code = (
        f"import sys; sys.path[:0] = [{str(repo)!r}, {str(farm)!r}]; import runpy; "
        f"runpy.run_module({module!r}, run_name='__main__')"
    )
    return [sys.executable, "-S", "-c", code]
