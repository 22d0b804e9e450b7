"""Credential-shaped files the deny list must refuse at the tools' seam, naming the rule.

Sources of inspiration: the default rules of gitleaks (``gitleaks.toml``: netrc, npmrc, pypirc,
kubeconfig, Docker config) and trufflehog's detectors; GitHub's secret-scanning file list; the
places each tool documents that it keeps credentials (direnv's .envrc, git-credential-store's
~/.git-credentials, ~/.aws/credentials, ~/.docker/config.json, ~/.kube/config, ~/.config/gcloud,
~/.azure, ~/.cargo/credentials.toml, ~/.gem/credentials, ~/.config/gh/hosts.yml, ~/.pgpass,
~/.vault-token); OpenSSH's key names (id_rsa, id_ed25519_sk, -cert.pub); and the leftovers that
leak keys from web roots and repositories: ``id_rsa~``, ``.id_rsa.swp`` (vim), ``#id_rsa#`` and
``.#id_rsa`` (emacs), ``server.key.orig``, ``.env.bak``, ``id_rsa (1)`` (a desktop's copy).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shelldon.config import Settings
from shelldon.contracts import ToolCall
from shelldon.worker.tools import Registry, build_registry, execute_tool

SECRET = "TOKEN-sk-live-1234"

CREDENTIAL_FILES = [
    (".envrc", "direnv"),
    ("project/.envrc", "direnv"),
    (".netrc", "netrc"),
    ("_netrc", "netrc"),
    (".git-credentials", "git-credentials"),
    (".npmrc", "npmrc"),
    ("web/.npmrc", "npmrc"),
    (".pypirc", "pypirc"),
    (".pgpass", "database-passwords"),
    (".my.cnf", "database-passwords"),
    (".vault-token", "token-file"),
    (".aws/credentials", "aws"),
    (".aws/config", "aws"),
    (".aws/sso/cache/token.json", "aws"),
    (".azure/accessTokens.json", "azure"),
    (".config/gcloud/credentials.db", "gcloud"),
    ("keys/application_default_credentials.json", "gcloud"),
    (".docker/config.json", "docker-config"),
    (".dockercfg", "docker-config"),
    (".kube/config", "kube-config"),
    ("deploy/kubeconfig", "kube-config"),
    ("prod.kubeconfig.yaml", "kube-config"),
    ("kubeconfig-staging", "kube-config"),
    ("clusters/prod-kubeconfig.yml", "kube-config"),
    ("kubeconfig.json", "kube-config"),
    (".cargo/credentials.toml", "cargo-credentials"),
    (".cargo/credentials", "cargo-credentials"),
    (".gem/credentials", "gem-credentials"),
    (".config/gh/hosts.yml", "gh-hosts"),
    (".ssh/config", "ssh-dir"),
    (".ssh/known_hosts", "ssh-dir"),
    (".ssh/authorized_keys", "ssh-dir"),
    ("old-laptop/.ssh/deploy_key", "ssh-dir"),
    (".gnupg/pubring.kbx", "gnupg-dir"),
    (".gnupg/private-keys-v1.d/ABC.key", "gnupg-dir"),
    ("id_rsa", "ssh-key"),
    ("id_dsa.pub", "ssh-key"),
    ("id_ecdsa", "ssh-key"),
    ("id_ed25519_sk", "ssh-key"),
    ("id_ecdsa_sk.pub", "ssh-key"),
    ("id_ed25519-cert.pub", "ssh-key"),
    ("vault.kdbx", "key-file"),
    ("release.keystore", "key-file"),
    # backups and editor copies
    ("id_rsa~", "ssh-key"),
    ("id_rsa.bak", "ssh-key"),
    ("id_rsa.old", "ssh-key"),
    ("id_rsa.orig", "ssh-key"),
    ("id_rsa.bak.old", "ssh-key"),
    ("id_ed25519.~1~", "ssh-key"),
    ("id_rsa.dpkg-old", "ssh-key"),
    (".id_rsa.swp", "ssh-key"),
    (".id_ed25519.un~", "ssh-key"),
    ("#id_rsa#", "ssh-key"),
    (".#id_rsa", "ssh-key"),
    ("id_rsa (1)", "ssh-key"),
    ("id_rsa copy", "ssh-key"),
    ("id_rsa-backup", "ssh-key"),
    ("server.key.orig", "key-file"),
    ("server.pem~", "key-file"),
    ("tls.crt.save", "key-file"),
    (".env~", "env-file"),
    (".env.bak", "env-file"),
    ("prod.env.swp", "env-file"),
    (".netrc~", "netrc"),
    (".npmrc.bak", "npmrc"),
    (".git-credentials.old", "git-credentials"),
    (".ssh.bak/id_custom", "ssh-dir"),
    # case and compatibility forms
    (".NETRC", "netrc"),
    (".SSH/config", "ssh-dir"),
    ("ID_ED25519", "ssh-key"),
    (".Docker/Config.json", "docker-config"),
    (".ENVRC", "direnv"),
    (".AWS/Credentials", "aws"),
    ("\uff0enetrc", "netrc"),  # FULLWIDTH FULL STOP folds to '.' under NFKC
]

IDS = [path for path, _ in CREDENTIAL_FILES]


@pytest.fixture
def registry(settings: Settings) -> Registry:
    return build_registry(settings)


def _plant(ws: Path, path: str) -> Path:
    target = ws / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(SECRET)
    return target


def _run(registry: Registry, tool: str, **args: str) -> tuple[bool, str]:
    result = execute_tool(registry, ToolCall("c", tool, dict(args)), approved=True)
    return result.ok, result.content


@pytest.mark.parametrize(("path", "rule"), CREDENTIAL_FILES, ids=IDS)
def test_credential_file_is_refused_by_read_file_naming_its_rule(
    registry: Registry, home: Path, path: str, rule: str
) -> None:
    _plant(home / "workspace", path)
    ok, content = _run(registry, "read_file", path=path)
    assert not ok
    assert f"deny rule '{rule}'" in content
    assert SECRET not in content


@pytest.mark.parametrize(("path", "rule"), CREDENTIAL_FILES, ids=IDS)
def test_credential_file_is_refused_by_write_file_and_left_alone(
    registry: Registry, home: Path, path: str, rule: str
) -> None:
    target = _plant(home / "workspace", path)
    ok, content = _run(registry, "write_file", path=path, content="planted")
    assert not ok
    assert f"deny rule '{rule}'" in content
    assert target.read_text() == SECRET


@pytest.mark.parametrize(("path", "rule"), CREDENTIAL_FILES, ids=IDS)
def test_credential_file_is_hidden_from_list_dir(
    registry: Registry, home: Path, path: str, rule: str
) -> None:
    target = _plant(home / "workspace", path)
    parent = str(Path(path).parent)
    ok, content = _run(registry, "list_dir", path=parent)
    if ok:  # the directory itself may be refused (.ssh, .aws): that hides it too
        assert target.name not in content
        assert "deny-listed entries not shown" in content
    else:
        assert "deny rule" in content


@pytest.mark.parametrize("secret", [".aws/credentials", ".ssh/id_custom", "deploy/.npmrc"])
def test_an_innocent_symlink_to_a_credential_file_is_refused(
    registry: Registry, home: Path, secret: str
) -> None:
    ws = home / "workspace"
    _plant(ws, secret)
    (ws / "notes.txt").symlink_to(secret)
    ok, content = _run(registry, "read_file", path="notes.txt")
    assert not ok and "resolves to a refused file" in content
    assert SECRET not in content
    ok, content = _run(registry, "write_file", path="notes.txt", content="planted")
    assert not ok and "resolves to a refused file" in content
    assert (ws / secret).read_text() == SECRET


def test_the_catalogue_covers_every_rule() -> None:
    from shelldon.worker.tools.jail import DENY_RULES

    assert {rule.name for rule in DENY_RULES} - {"vault"} <= {rule for _, rule in CREDENTIAL_FILES}
