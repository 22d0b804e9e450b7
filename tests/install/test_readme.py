"""The README's first command, copied out of README.md and run as a new user would on a fresh
copy of the checkout: it must build a venv that gates and runs the self-coding story. A venv
without pytest (the bug this guards against) must not pass for a working demo."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import ReadmeRun
from .newuser import (
    REPO,
    clone_venv,
    converse,
    demo_home,
    dev_only_distributions,
    imports,
    installed_distributions,
    new_user_env,
    readme_first_command,
    story_problems,
)

DEMO_BOUND_S = 120.0


def test_the_readme_command_is_what_the_tests_run() -> None:
    command = readme_first_command()
    assert "python3 -m venv" in command and "shelldon demo" in command, command
    assert command in (REPO / "README.md").read_text()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_readme_first_command(readme_run: ReadmeRun) -> None:
    run = readme_run.run
    context = f"`{readme_run.command}` in {readme_run.checkout}: {run.how_it_ended()}, "
    context += f"{run.answered} prompt(s) answered y\n{run.transcript()}"
    assert story_problems(run) == [], context
    assert run.answered >= 1, "the demo never asked at a [y/N] prompt\n" + context
    home = demo_home(run.stdout)
    assert home is not None, context
    assert (home / "toolbox" / "live" / "word_count.py").exists(), context
    # The gate's pytest came with the package, and nothing of the dev extra did.
    python = readme_run.venv / "bin" / "python"
    env = new_user_env(readme_run.home)
    assert imports(python, "pytest", env)
    for module in ("hypothesis", "xdist"):
        assert not imports(python, module, env), f"dev-only {module} in the README's venv"
    leaked = installed_distributions(python, env) & dev_only_distributions()
    assert not leaked, f"dev-only distributions in the README's venv: {sorted(leaked)}"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_venv_without_pytest_does_not_pass_the_demo(
    readme_run: ReadmeRun, tmp_path: Path, record_property: pytest.RecordProperty
) -> None:
    """The negative control: the README's venv with pytest uninstalled (what every install got
    before pytest was a runtime dependency) must not end the demo with exit status 0."""
    assert (readme_run.venv / "bin" / "shelldon").exists(), (
        "the README's command built no venv\n" + readme_run.run.transcript()
    )
    venv = clone_venv(readme_run.venv, tmp_path / "venv")
    env = new_user_env(tmp_path / "home")
    uninstall = subprocess.run(
        [str(venv / "bin" / "pip"), "uninstall", "-y", "pytest"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert uninstall.returncode == 0, uninstall.stdout + uninstall.stderr
    assert not imports(venv / "bin" / "python", "pytest", env)
    run = converse(
        [str(venv / "bin" / "shelldon"), "demo", "--yes", "--home", str(tmp_path / "demo")],
        cwd=tmp_path,
        env=env,
        timeout=DEMO_BOUND_S,
    )
    ended = run.how_it_ended()
    record_property("demo_without_pytest", ended)
    # The same checks as the README test's would have failed it.
    assert story_problems(run), f"{ended}, yet the story looks whole\n{run.transcript()}"
    # And the demo says so at once, plainly, and ends (it used to wait forever).
    assert not run.timed_out, f"the demo without pytest hung: {ended}\n{run.transcript()}"
    assert run.returncode == 1, f"{ended}\n{run.transcript()}"
    assert f"pytest is not installed for {venv / 'bin' / 'python'}" in run.stdout, run.transcript()
    last = run.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    assert last.startswith("shelldon: the demo stopped at step 3: the tool I wrote did not pass")
    shutil.rmtree(venv, ignore_errors=True)
