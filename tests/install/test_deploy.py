"""deploy/install.sh for real (a venv built with pip, no --skip-venv) in a scratch root, from a
fresh copy of the checkout: the installed venv gates and runs the self-coding story."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .newuser import (
    converse,
    demo_home,
    dev_only_distributions,
    fresh_copy,
    imports,
    installed_distributions,
    new_user_env,
    story_problems,
)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_installed_venv_gates_and_runs_the_demo(tmp_path: Path) -> None:
    checkout = fresh_copy(tmp_path / "shelldon")
    env = new_user_env(tmp_path / "home")
    root = tmp_path / "root"
    install = converse(
        ["bash", str(checkout / "deploy" / "install.sh"), "--prefix", str(root)],
        cwd=checkout,
        env=env,
        timeout=300,
    )
    assert install.returncode == 0, f"{install.how_it_ended()}\n{install.transcript()}"
    venv = root / "opt" / "shelldon" / "venv"
    python = venv / "bin" / "python"
    assert imports(python, "pytest", env)
    leaked = installed_distributions(python, env) & dev_only_distributions()
    assert not leaked, f"dev-only distributions in the installed venv: {sorted(leaked)}"
    # The installed copy runs, not the checkout it came from.
    where = subprocess.run(
        [str(python), "-c", "import shelldon; print(shelldon.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr
    run = converse(
        [str(venv / "bin" / "shelldon"), "demo", "--yes", "--home", str(tmp_path / "demo")],
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert story_problems(run) == [], f"{run.how_it_ended()}\n{run.transcript()}"
    assert demo_home(run.stdout) == tmp_path / "demo"
    assert (tmp_path / "demo" / "toolbox" / "live" / "word_count.py").exists()
    shutil.rmtree(root / "opt", ignore_errors=True)
