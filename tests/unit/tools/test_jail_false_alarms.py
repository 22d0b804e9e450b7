"""What a model does all the time with files must work at the tools' seam: every refusal costs
a turn. Each case here was refused before and is judged by what it resolves to now.

Sources: the benign half of the guard corpus (data files named ``id_*``, paths a model builds
with ``..`` or from the absolute workspace path it was shown, writes through the symlinks a
project keeps, such as ``current -> releases/v2``), and the names around real secrets that
must stay readable (``.docker/Dockerfile``, ``docker/config.json``, ``.sshrc``, ``notes.bak``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import ToolCall
from shelldon.worker.tools import Registry, build_registry, execute_tool


@pytest.fixture
def registry(settings: Settings) -> Registry:
    return build_registry(settings)


@pytest.fixture
def ws(home: Path) -> Path:
    return home / "workspace"


def _run(registry: Registry, tool: str, **args: str) -> tuple[bool, str]:
    result = execute_tool(registry, ToolCall("c", tool, dict(args)), approved=True)
    return result.ok, result.content


ORDINARY_NAMES = [
    "id_users.csv",
    "id_2026.txt",
    "ids/id_42.json",
    "id_rsa_notes.md",
    "data/id_ed25519_fingerprints.txt",
    "id_mapping",
    "identity.txt",
    "docker/config.json",
    ".docker/Dockerfile",
    "kube/config",
    ".config/app/settings.toml",
    "config.json",
    "credentials.md",
    "docs/kubeconfig.md",
    "kubeconfig-guide.txt",
    "netrc.md",
    "envrc.example.md",
    ".sshrc",
    "ssh_notes.md",
    "aws/handler.py",
    "gnupg.md",
    "notes.bak",
    "todo.txt~",
    "#draft.md#",
    ".report.md.swp.txt",
    "environment.yml",
    "monkey.py",
    "keys.txt",
    "my.envelope",
    ".github/workflows/ci.yml",
]


@pytest.mark.parametrize("path", ORDINARY_NAMES)
def test_ordinary_names_are_written_read_and_listed(
    registry: Registry, ws: Path, path: str
) -> None:
    assert _run(registry, "write_file", path=path, content="plain data\n") == (
        True,
        f"wrote 11 bytes to {path}",
    )
    assert _run(registry, "read_file", path=path) == (True, "plain data\n")
    ok, listing = _run(registry, "list_dir", path=str(Path(path).parent))
    assert ok and Path(path).name in listing


@pytest.mark.parametrize(
    "path", ["a/../notes.txt", "a/b/../../notes.txt", "./a/../notes.txt", "../workspace/notes.txt"]
)
def test_dotdot_that_stays_inside_reads_and_writes(registry: Registry, ws: Path, path: str) -> None:
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "notes.txt").write_text("hello")
    assert _run(registry, "read_file", path=path) == (True, "hello")
    assert _run(registry, "write_file", path=path, content="changed")[0]
    assert (ws / "notes.txt").read_text() == "changed"
    assert _run(registry, "list_dir", path="a/..")[0]


def test_absolute_paths_inside_the_workspace_work(registry: Registry, ws: Path) -> None:
    (ws / "notes").mkdir()
    (ws / "notes" / "a.txt").write_text("hello")
    for base in (str(ws), str(ws.resolve())):
        assert _run(registry, "read_file", path=f"{base}/notes/a.txt") == (True, "hello")
        assert _run(registry, "list_dir", path=base) == (True, "notes/")
        assert _run(registry, "write_file", path=f"{base}/notes/b.txt", content="x")[0]
    assert (ws / "notes" / "b.txt").read_text() == "x"


def test_write_through_a_file_symlink_inside_writes_its_target(
    registry: Registry, ws: Path
) -> None:
    (ws / "releases").mkdir()
    (ws / "releases" / "v2.txt").write_text("old")
    (ws / "current.txt").symlink_to("releases/v2.txt")
    assert _run(registry, "write_file", path="current.txt", content="new")[0]
    assert (ws / "releases" / "v2.txt").read_text() == "new"
    assert (ws / "current.txt").is_symlink()
    assert _run(registry, "read_file", path="current.txt") == (True, "new")


def test_write_through_a_directory_symlink_inside_writes_beneath_its_target(
    registry: Registry, ws: Path
) -> None:
    (ws / "releases" / "v2").mkdir(parents=True)
    (ws / "current").symlink_to("releases/v2", target_is_directory=True)
    assert _run(registry, "write_file", path="current/app.py", content="print()")[0]
    assert (ws / "releases" / "v2" / "app.py").read_text() == "print()"


def test_write_through_a_dangling_symlink_inside_creates_its_target(
    registry: Registry, ws: Path
) -> None:
    (ws / "latest.md").symlink_to("drafts/today.md")
    assert _run(registry, "write_file", path="latest.md", content="draft")[0]
    assert (ws / "drafts" / "today.md").read_text() == "draft"


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("/etc/passwd", "absolute path outside the workspace"),
        ("../outside.txt", "climb out of the workspace"),
        ("a/../../outside.txt", "climb out of the workspace"),
        ("escape/x.txt", "resolves outside it"),
        ("alias.txt", "resolves outside it"),
    ],
)
def test_what_still_leaves_the_workspace_is_refused(
    registry: Registry, ws: Path, tmp_path: Path, path: str, why: str
) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "x.txt").write_text("OUTSIDE")
    (ws / "escape").symlink_to(tmp_path / "outside", target_is_directory=True)
    (ws / "alias.txt").symlink_to(tmp_path / "outside" / "x.txt")
    for tool, args in (("read_file", {}), ("write_file", {"content": "planted"})):
        ok, content = _run(registry, tool, path=path, **args)
        assert not ok and why in content, (tool, content)
    assert (tmp_path / "outside" / "x.txt").read_text() == "OUTSIDE"
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["x.txt"]
