"""The path jail's ordinary behaviour: relative paths resolve inside, names are judged fairly."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shelldon.worker.tools import ToolError
from shelldon.worker.tools.jail import is_denied, resolve_in_jail


@pytest.fixture
def ws(home: Path) -> Path:
    return home / "workspace"


@pytest.fixture
def vault(home: Path) -> Path:
    return home / "vault"


def test_relative_path_resolves_to_the_file_inside_the_workspace(ws: Path, vault: Path) -> None:
    (ws / "notes").mkdir()
    (ws / "notes" / "todo.txt").write_text("milk")
    assert resolve_in_jail(ws, "notes/todo.txt", vault) == (ws / "notes" / "todo.txt").resolve()


def test_dot_and_empty_path_name_the_workspace_root(ws: Path, vault: Path) -> None:
    assert resolve_in_jail(ws, ".", vault) == ws.resolve()
    assert resolve_in_jail(ws, "", vault) == ws.resolve()
    assert resolve_in_jail(ws, "./", vault) == ws.resolve()


def test_a_file_that_does_not_exist_yet_resolves_for_writers(ws: Path, vault: Path) -> None:
    assert resolve_in_jail(ws, "new/file.txt", vault) == ws.resolve() / "new" / "file.txt"


def test_symlink_that_stays_inside_the_workspace_is_followed(ws: Path, vault: Path) -> None:
    (ws / "real.txt").write_text("x")
    (ws / "alias.txt").symlink_to("real.txt")
    assert resolve_in_jail(ws, "alias.txt", vault) == (ws / "real.txt").resolve()


def test_workspace_reached_through_a_symlink_still_works(tmp_path: Path, vault: Path) -> None:
    real = tmp_path / "real-ws"
    real.mkdir()
    (real / "a.txt").write_text("a")
    link = tmp_path / "ws-link"
    link.symlink_to(real)
    assert resolve_in_jail(link, "a.txt", vault) == (real / "a.txt").resolve()


def test_missing_workspace_is_a_clear_error(tmp_path: Path, vault: Path) -> None:
    with pytest.raises(ToolError, match="cannot resolve"):
        resolve_in_jail(tmp_path / "nope", "a.txt", vault)


def test_dotdot_that_stays_inside_resolves_to_the_file(ws: Path, vault: Path) -> None:
    # Relaxed: '..' is resolved with the rest of the path and the result judged.
    (ws / "a").mkdir()
    (ws / "b.txt").write_text("b")
    assert resolve_in_jail(ws, "a/../b.txt", vault) == (ws / "b.txt").resolve()
    assert resolve_in_jail(ws, f"../{ws.name}/b.txt", vault) == (ws / "b.txt").resolve()


def test_absolute_path_inside_the_workspace_resolves(ws: Path, vault: Path) -> None:
    # Relaxed: an absolute path is judged by where it lands, like any other.
    (ws / "a.txt").write_text("a")
    assert resolve_in_jail(ws, str(ws / "a.txt"), vault) == (ws / "a.txt").resolve()
    assert resolve_in_jail(ws, str(ws.resolve() / "a.txt"), vault) == (ws / "a.txt").resolve()
    assert resolve_in_jail(ws, str(ws), vault) == ws.resolve()


def test_refusal_tells_the_model_paths_are_relative_to_the_workspace(ws: Path, vault: Path) -> None:
    with pytest.raises(ToolError) as info:
        resolve_in_jail(ws, "/etc/hostname", vault)
    assert "absolute path outside the workspace" in str(info.value)
    assert "relative to the workspace root" in str(info.value)


@pytest.mark.parametrize(
    "name",
    [
        "notes.txt",
        "env.txt",
        "environment.md",
        "keys.txt",
        "monkey.py",
        "valid_ids.csv",
        "identity.txt",
        "my.envelope",
        "cert.pem.txt",
        "vaulted/notes.md",
        "src/pkg/module.py",
    ],
)
def test_ordinary_names_are_not_denied(name: str) -> None:
    assert is_denied(name) is None


def test_denied_name_says_why(tmp_path: Path) -> None:
    reason = is_denied("deploy/server.pem")
    assert reason is not None
    assert "server.pem" in reason
    assert ".pem" in reason


def test_is_denied_accepts_path_objects() -> None:
    assert is_denied(Path("a") / ".env") is not None
    assert is_denied(Path("a") / "b.txt") is None


def test_hard_linked_file_inside_the_workspace_is_refused(ws: Path, vault: Path) -> None:
    (ws / "one.txt").write_text("x")
    os.link(ws / "one.txt", ws / "two.txt")
    with pytest.raises(ToolError, match="hard links"):
        resolve_in_jail(ws, "one.txt", vault)


def test_directory_is_not_mistaken_for_a_hard_link(ws: Path, vault: Path) -> None:
    # A directory always has st_nlink >= 2; only regular files are judged by it.
    (ws / "d" / "sub").mkdir(parents=True)
    assert resolve_in_jail(ws, "d", vault) == (ws / "d").resolve()
