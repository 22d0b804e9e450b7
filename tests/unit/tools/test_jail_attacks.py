"""Attacks on the path jail and the deny list; every one must be refused with a ToolError.

Sources of inspiration: OWASP "Path Traversal" and CWE-22/23/36/59/62 (relative and absolute
traversal, link following, hard links); the seed's "The path jail" (an absolute path drops the
root in a join; a symlink inside pointing out); Apache CVE-2021-41773 (traversal that survives a
prefix check); Python's tarfile CVE-2007-4559 and PEP 706's extraction filters (symlinks and
hard links pointing outside the destination); the string-prefix containment bug (`/ws-evil`
passing `startswith('/ws')`); `/proc/self/root` and `/proc/self/cwd` magic links; secret-file
names from the default rules of gitleaks and trufflehog (.env, *.pem, id_rsa, .htpasswd, keystores).
"""

from __future__ import annotations

import os
from pathlib import Path

import hypothesis
import pytest
from hypothesis import strategies as st

from shelldon.worker.tools import ToolContext, ToolError
from shelldon.worker.tools.files import list_dir, read_file
from shelldon.worker.tools.jail import DENIED_SUFFIXES, is_denied, resolve_in_jail

SECRET = "TOP-SECRET-OUTSIDE"


@pytest.fixture
def ws(home: Path) -> Path:
    return home / "workspace"


@pytest.fixture
def vault(home: Path) -> Path:
    (home / "vault" / "telegram_token").write_text("123:ABC")
    return home / "vault"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the home with a secret file in it."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text(SECRET)
    return d


def refused(ws: Path, path: str, vault: Path) -> str:
    with pytest.raises(ToolError) as info:
        resolve_in_jail(ws, path, vault)
    return str(info.value)


# --- traversal (8) -------------------------------------------------------------------------

TRAVERSALS = [
    "..",
    "../vault/telegram_token",
    "../../outside/secret.txt",
    "a/../../x",
    "./../x",
    "a/b/../../../x",
    "notes/../../../../../../etc/passwd",
    "..//..//etc/passwd",
]


@pytest.mark.parametrize("path", TRAVERSALS)
def test_traversal_is_refused(ws: Path, vault: Path, path: str) -> None:
    assert "'..'" in refused(ws, path, vault)


# --- absolute paths outside (7) ------------------------------------------------------------


@pytest.mark.parametrize("path", ["/etc/passwd", "/", "//etc/passwd", "/tmp", "/dev/zero"])
def test_absolute_path_is_refused(ws: Path, vault: Path, path: str) -> None:
    assert "absolute" in refused(ws, path, vault)


def test_absolute_path_through_a_sibling_of_the_workspace_is_refused(
    ws: Path, vault: Path, outside: Path
) -> None:
    # Absolute paths are allowed only where they start at the workspace; the rest is refused
    # before anything outside is even looked at.
    assert "absolute" in refused(ws, str(outside / "secret.txt"), vault)
    assert "absolute" in refused(ws, f"{ws}/../outside/secret.txt", vault)


# --- home directory (3) --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["~", "~/.ssh/known_hosts", "~root/.bashrc"])
def test_tilde_is_refused(ws: Path, vault: Path, path: str) -> None:
    assert "'~'" in refused(ws, path, vault)


# --- NUL bytes (3) -------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["a\x00b", "\x00", "notes.txt\x00../../etc/passwd"])
def test_nul_byte_is_refused(ws: Path, vault: Path, path: str) -> None:
    assert "NUL" in refused(ws, path, vault)


# --- symlinks pointing out (10) ------------------------------------------------------------


def test_file_symlink_pointing_out_is_refused_and_not_read(
    ws: Path, vault: Path, outside: Path, ctx: ToolContext
) -> None:
    (ws / "notes.txt").symlink_to(outside / "secret.txt")
    assert "resolves outside it" in refused(ws, "notes.txt", vault)
    with pytest.raises(ToolError) as info:
        read_file(ctx, "notes.txt")
    assert SECRET not in str(info.value)


def test_directory_symlink_pointing_out_is_refused(
    ws: Path, vault: Path, outside: Path, ctx: ToolContext
) -> None:
    (ws / "docs").symlink_to(outside, target_is_directory=True)
    assert "resolves outside it" in refused(ws, "docs/secret.txt", vault)
    assert "resolves outside it" in refused(ws, "docs", vault)
    with pytest.raises(ToolError):
        list_dir(ctx, "docs")


def test_chained_symlinks_pointing_out_are_refused(ws: Path, vault: Path, outside: Path) -> None:
    (ws / "c").symlink_to(outside / "secret.txt")
    (ws / "b").symlink_to("c")
    (ws / "a").symlink_to("b")
    assert "resolves outside it" in refused(ws, "a", vault)


def test_chained_directory_symlinks_through_an_inner_dir_are_refused(
    ws: Path, vault: Path, outside: Path
) -> None:
    (ws / "inner").mkdir()
    (ws / "inner" / "hop").symlink_to(outside, target_is_directory=True)
    (ws / "entry").symlink_to("inner/hop", target_is_directory=True)
    assert "resolves outside it" in refused(ws, "entry/secret.txt", vault)


def test_relative_symlink_climbing_out_is_refused(ws: Path, vault: Path, outside: Path) -> None:
    (ws / "up").symlink_to("../../outside/secret.txt")
    assert "resolves outside it" in refused(ws, "up", vault)


def test_symlink_to_root_is_refused(ws: Path, vault: Path) -> None:
    (ws / "root").symlink_to("/", target_is_directory=True)
    assert "resolves outside it" in refused(ws, "root/etc/passwd", vault)


def test_dangling_symlink_pointing_out_is_refused(ws: Path, vault: Path, tmp_path: Path) -> None:
    # A writer must not be able to create a file outside through a link to a missing target.
    (ws / "drop.txt").symlink_to(tmp_path / "outside-new.txt")
    assert "resolves outside it" in refused(ws, "drop.txt", vault)


def test_symlink_into_the_vault_is_refused(ws: Path, vault: Path) -> None:
    (ws / "token").symlink_to(vault / "telegram_token")
    (ws / "v").symlink_to(vault, target_is_directory=True)
    assert refused(ws, "token", vault)
    assert refused(ws, "v/telegram_token", vault)


def test_symlink_loop_is_refused_without_hanging(ws: Path, vault: Path, ctx: ToolContext) -> None:
    (ws / "loop1").symlink_to("loop2")
    (ws / "loop2").symlink_to("loop1")
    with pytest.raises(ToolError):
        read_file(ctx, "loop1")


def test_symlink_to_an_inside_secret_is_refused_by_its_resolved_name(
    ws: Path, vault: Path, ctx: ToolContext
) -> None:
    (ws / ".env").write_text("API_KEY=sk-live")
    (ws / "harmless.txt").symlink_to(".env")
    assert "resolves to a refused file" in refused(ws, "harmless.txt", vault)
    with pytest.raises(ToolError) as info:
        read_file(ctx, "harmless.txt")
    assert "sk-live" not in str(info.value)


# --- /proc/self/root and friends (4) -------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/proc/self/root/etc/passwd", "/proc/self/cwd/x", "/proc/1/root/etc/shadow"]
)
def test_proc_magic_paths_are_refused(ws: Path, vault: Path, path: str) -> None:
    assert "absolute" in refused(ws, path, vault)


def test_symlink_through_proc_self_root_is_refused(ws: Path, vault: Path, outside: Path) -> None:
    (ws / "p").symlink_to(f"/proc/self/root{outside}/secret.txt")
    assert "resolves outside it" in refused(ws, "p", vault)


# --- hard links (2) ------------------------------------------------------------------------


def test_hard_link_to_an_outside_file_is_refused_and_not_read(
    ws: Path, vault: Path, outside: Path, ctx: ToolContext
) -> None:
    os.link(outside / "secret.txt", ws / "smuggled.txt")
    assert "hard links" in refused(ws, "smuggled.txt", vault)
    with pytest.raises(ToolError) as info:
        read_file(ctx, "smuggled.txt")
    assert SECRET not in str(info.value)


def test_hard_link_reached_through_an_inside_symlink_is_refused(
    ws: Path, vault: Path, outside: Path
) -> None:
    os.link(outside / "secret.txt", ws / "smuggled.txt")
    (ws / "alias").symlink_to("smuggled.txt")
    assert "hard links" in refused(ws, "alias", vault)


# --- the /ws-evil sibling prefix (3) -------------------------------------------------------


@pytest.fixture
def evil(ws: Path) -> Path:
    """A sibling whose name starts with the workspace's: ``<home>/workspace-evil``."""
    d = ws.parent / (ws.name + "-evil")
    d.mkdir()
    (d / "loot.txt").write_text(SECRET)
    return d


def test_symlink_to_a_sibling_with_the_workspace_as_prefix_is_refused(
    ws: Path, vault: Path, evil: Path
) -> None:
    (ws / "abs").symlink_to(evil / "loot.txt")
    (ws / "rel").symlink_to(f"../{evil.name}/loot.txt")
    assert "resolves outside it" in refused(ws, "abs", vault)
    assert "resolves outside it" in refused(ws, "rel", vault)


def test_sibling_prefix_workspace_path_as_text_is_refused(
    ws: Path, vault: Path, evil: Path
) -> None:
    assert refused(ws, f"../{evil.name}/loot.txt", vault)
    assert refused(ws, f"{ws}-evil/loot.txt", vault)


def test_sibling_directory_symlink_is_refused(ws: Path, vault: Path, evil: Path) -> None:
    (ws / "d").symlink_to(evil, target_is_directory=True)
    assert "resolves outside it" in refused(ws, "d/loot.txt", vault)


# --- the vault when it lies inside the workspace (1) ---------------------------------------


def test_vault_inside_the_workspace_is_still_refused(ws: Path) -> None:
    inner_vault = ws / "secrets"
    inner_vault.mkdir()
    (inner_vault / "token").write_text("x")
    assert "vault" in refused(ws, "secrets/token", inner_vault)
    assert "vault" in refused(ws, "secrets", inner_vault)


# --- case variants of every deny pattern --------------------------------------------------


def _case_variants(name: str) -> list[str]:
    return sorted({name, name.upper(), name.title(), name.swapcase()})


DENIED_NAMES = sorted(
    {
        variant
        for base in [
            ".env",
            "prod.env",
            ".env.local",
            ".env.production",
            "id_rsa",
            "id_ed25519",
            "id_ecdsa.pub",
            ".htpasswd",
            *(f"server{suffix}" for suffix in DENIED_SUFFIXES),
        ]
        for variant in _case_variants(base)
    }
)


@pytest.mark.parametrize("name", DENIED_NAMES)
def test_deny_pattern_case_variant_is_refused_by_name(ws: Path, vault: Path, name: str) -> None:
    assert "refused" in refused(ws, name, vault)
    assert "refused" in refused(ws, f"deep/er/{name}", vault)


@pytest.mark.parametrize("name", ["vault/x", "VAULT/token", "Vault", "sub/VaUlT/key"])
def test_vault_name_in_any_case_is_refused(ws: Path, vault: Path, name: str) -> None:
    assert "vault" in refused(ws, name, vault)


@pytest.mark.parametrize("name", [".ENV", "Server.PEM", "ID_RSA", "x.Key"])
def test_deny_pattern_case_variant_is_refused_after_resolution(
    ws: Path, vault: Path, name: str
) -> None:
    (ws / name).write_text("secret")
    (ws / "innocent.txt").symlink_to(name)
    assert "resolves to a refused file" in refused(ws, "innocent.txt", vault)


def test_directory_named_like_a_secret_is_refused(ws: Path, vault: Path) -> None:
    (ws / "keys.PEM").mkdir()
    (ws / "keys.PEM" / "readme.txt").write_text("x")
    (ws / "docs").symlink_to("keys.PEM", target_is_directory=True)
    assert refused(ws, "docs/readme.txt", vault)


def test_fullwidth_lookalike_of_a_deny_pattern_is_refused(ws: Path, vault: Path) -> None:
    assert refused(ws, "\uff0eenv", vault)  # FULLWIDTH FULL STOP + "env" folds to ".env"
    assert refused(ws, "server.\uff30\uff25\uff2d", vault)  # fullwidth "PEM"


def test_attack_catalogue_is_large_enough() -> None:
    """The deny list is exercised by many case variants (reported in the note)."""
    assert len(DENIED_NAMES) >= 40


# --- any string at all (property) ----------------------------------------------------------

PATH_PIECES = st.sampled_from(
    ["a", "out", "loop", "..", ".", "", "~", "/", "\x00", ".env", "ID_RSA", "x.PEM", "vault",
     "ok.txt", "link", "-evil", "workspace"]
)  # fmt: skip


@hypothesis.settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
@hypothesis.given(pieces=st.lists(PATH_PIECES, max_size=6), sep=st.sampled_from(["/", "//"]))
def test_any_path_either_is_refused_or_stays_inside_and_allowed(
    ws: Path, vault: Path, evil: Path, pieces: list[str], sep: str
) -> None:
    if not (ws / "out").exists():
        (ws / "a").mkdir()
        (ws / "a" / "ok.txt").write_text("ok")
        (ws / "out").symlink_to(evil, target_is_directory=True)
        (ws / "link").symlink_to("a", target_is_directory=True)
        (ws / "a" / "link").symlink_to("../../vault", target_is_directory=True)
        (ws / "loop").symlink_to("loop")
    path = sep.join(pieces)
    try:
        real = resolve_in_jail(ws, path, vault)
    except ToolError:
        return
    root = ws.resolve()
    assert real.is_relative_to(root)
    assert not real.is_relative_to(vault.resolve())
    assert is_denied(real.relative_to(root)) is None
