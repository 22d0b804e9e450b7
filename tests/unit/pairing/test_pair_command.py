"""``shelldon pair CODE`` as the owner runs it: the sender of a good code becomes the owner in
the config file, once; a wrong, expired or used code pairs nobody and changes nothing."""

from __future__ import annotations

import io
import tomllib
from pathlib import Path

import pytest

from shelldon.cli.pair import pair
from shelldon.config import Settings, load_settings
from shelldon.rules import pairing as rules
from shelldon.store import PairingCode, Store

NOW = 1_800_000_000.0
CONFIG = (
    "# mine\n[telegram]\nallowed_users = []  # set by pairing\n\n[brain]\nprovider = 'scripted'\n"
)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(CONFIG)
    return load_settings(environ={"SHELLDON_HOME": str(home)})


def issue(settings: Settings, user_id: int, code: str, at: float = NOW) -> None:
    with Store(settings.database) as store:
        store.pairing.issue(
            PairingCode(
                user_id, user_id, "Ada", "ada", rules.digest(code), at, at + rules.CODE_TTL_S
            )
        )


def run(settings: Settings, typed: str, now: float = NOW + 30) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = pair(settings, typed, now, out, err)
    return status, out.getvalue(), err.getvalue()


def owners(settings: Settings) -> list[int]:
    assert settings.config_path is not None
    return list(tomllib.loads(settings.config_path.read_text())["telegram"]["allowed_users"])


def test_a_good_code_makes_its_sender_the_owner_once_and_is_audited(settings: Settings) -> None:
    issue(settings, 123456, "ABCDEFGH")
    status, out, err = run(settings, "abcd-efgh")
    assert (status, err) == (0, "")
    assert out.startswith(
        f"added Ada (@ada, id 123456) to allowed_users in {settings.config_path}\n"
    )
    assert "no restart" in out
    assert settings.config_path is not None
    assert settings.config_path.read_text() == CONFIG.replace("= []", "= [123456]")
    with Store(settings.database) as store:
        audit = store.audit.log()
    assert [(e.actor, e.action, e.subject) for e in audit] == [("owner", "paired", "123456")]
    assert audit[0].detail["username"] == "ada"
    status, _, err = run(settings, "ABCD-EFGH")  # used up
    assert status == 1 and "no such pairing code" in err


def test_a_wrong_or_expired_code_pairs_nobody(settings: Settings) -> None:
    issue(settings, 7, "ABCDEFGH")
    assert run(settings, "ABCD-EFGJ")[0] == 1
    status, _, err = run(settings, "ABCD-EFGH", now=NOW + rules.CODE_TTL_S + 1)
    assert status == 1 and "expired" in err
    assert owners(settings) == []


def test_what_cannot_be_a_code_is_a_usage_error(settings: Settings) -> None:
    issue(settings, 7, "ABCDEFGH")
    status, _, err = run(settings, "hunter2")
    assert status == 2 and "not a pairing code" in err
    assert owners(settings) == []


def test_without_a_database_nothing_is_created(settings: Settings) -> None:
    status, _, err = run(settings, "ABCD-EFGH")
    assert status == 1 and "no database" in err
    assert not settings.database.exists()


def test_a_config_that_names_an_owner_already_keeps_it_and_the_code(settings: Settings) -> None:
    issue(settings, 7, "ABCDEFGH")
    assert settings.config_path is not None
    settings.config_path.write_text("[telegram]\nallowed_users = [5]\n")
    status, _, err = run(settings, "ABCD-EFGH")
    assert status == 1 and "already names [5]" in err and "still good" in err
    assert owners(settings) == [5]
    with Store(settings.database) as store:
        assert store.pairing.outstanding(7, NOW + 60) is not None
        assert store.audit.log() == []
