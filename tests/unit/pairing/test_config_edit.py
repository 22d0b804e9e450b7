"""``shelldon pair``'s edit of the config file: one value set, every other byte kept, the file
replaced atomically with its owner, group and mode. Attack cases (the key in a comment, in a
string, in another table; a symlink) are from the issue's threat list."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from shelldon.config_edit import ConfigEditError, add_owner, with_owner

INSTALLED = """\
# shelldon configuration (see README "Configuration"). Secrets do NOT go here:
# sudo /opt/shelldon/src/deploy/install.sh --credential telegram_token

[telegram]
# Who may talk to the pet: message the bot, then sudo shelldon pair CODE.
allowed_users = []

[brain]
provider = "anthropic"
model = "claude-sonnet-4-5"
# base_url = "https://api.z.ai/api/anthropic"

[limits]
daily_turn_budget = 48
"""


def only_change(before: str, after: str, old: str, new: str) -> None:
    """``after`` is ``before`` with the one occurrence of ``old`` at the key replaced."""
    at = after.index(new)
    assert after[:at] == before[:at]
    assert after[at + len(new) :] == before[at + len(old) :]


def test_the_installed_config_gets_the_id_and_keeps_every_other_byte() -> None:
    after = with_owner(INSTALLED, 123456)
    assert after == INSTALLED.replace("allowed_users = []", "allowed_users = [123456]")
    assert tomllib.loads(after)["telegram"]["allowed_users"] == [123456]


def test_an_inline_comment_and_odd_spacing_stay() -> None:
    before = '[telegram]\napi_base = "https://api.telegram.org"\n  allowed_users=[ ]   # me\n'
    after = with_owner(before, 42)
    assert (
        after == '[telegram]\napi_base = "https://api.telegram.org"\n  allowed_users=[42]   # me\n'
    )


def test_a_multiline_empty_list_with_a_comment_inside_is_replaced_whole() -> None:
    before = "[telegram]\nallowed_users = [\n  # nobody yet\n]\npoll_timeout_s = 30\n"
    after = with_owner(before, 7)
    assert after == "[telegram]\nallowed_users = [7]\npoll_timeout_s = 30\n"


def test_an_absent_key_is_added_under_the_telegram_header() -> None:
    before = '# top\n[brain]\nprovider = "openai"\n\n[telegram]  # the bot\napi_base = "x"\n'
    after = with_owner(before, 99)
    assert after == (
        '# top\n[brain]\nprovider = "openai"\n\n[telegram]  # the bot\n'
        'allowed_users = [99]\napi_base = "x"\n'
    )


def test_an_absent_table_is_appended_and_an_empty_file_gets_one() -> None:
    before = '[brain]\nprovider = "openai"'
    assert (
        with_owner(before, 5) == '[brain]\nprovider = "openai"\n\n[telegram]\nallowed_users = [5]\n'
    )
    assert with_owner("", 5) == "[telegram]\nallowed_users = [5]\n"


def test_crlf_line_endings_stay_crlf() -> None:
    before = '[telegram]\r\napi_base = "https://api.telegram.org"\r\n[brain]\r\n'
    after = with_owner(before, 3)
    assert (
        after
        == '[telegram]\r\nallowed_users = [3]\r\napi_base = "https://api.telegram.org"\r\n[brain]\r\n'
    )


def test_the_key_in_a_comment_a_string_or_another_table_is_not_touched() -> None:
    before = '''\
# allowed_users = [666]
[brain]
persona = """You are a pet.
[telegram]
allowed_users = []
"""
script = 'allowed_users = []'
telegram.allowed_users = []

[telegram.extra]
allowed_users = []

[telegram]
api_base = "https://api.telegram.org" # allowed_users = []
allowed_users = [] # the one
'''
    after = with_owner(before, 11)
    only_change(before, after, "allowed_users = [] # the one", "allowed_users = [11] # the one")
    data = tomllib.loads(after)
    assert data["telegram"]["allowed_users"] == [11]
    assert data["telegram"]["extra"]["allowed_users"] == []
    assert data["brain"]["telegram"]["allowed_users"] == []
    assert "allowed_users = []\n" in data["brain"]["persona"]


def test_a_quoted_header_and_key_and_a_root_dotted_key_are_found() -> None:
    assert with_owner('[ "telegram" ]\n"allowed_users" = []\n', 8) == (
        '[ "telegram" ]\n"allowed_users" = [8]\n'
    )
    assert with_owner("telegram.allowed_users = [] # root\n", 8) == (
        "telegram.allowed_users = [8] # root\n"
    )


def test_strings_with_escapes_brackets_and_dates_do_not_confuse_the_scan() -> None:
    before = (
        "[brain]\npersona = \"say \\\"[telegram]\\\" \\\\\"\nscript = '''a ]\n[x]'''\n"
        '[limits]\nwhen = 1979-05-27 07:32:00Z\nlist = [ [1, 2], {a = "]"} ]\n'
        "[telegram]\nallowed_users = []\n"
    )
    after = with_owner(before, 4)
    assert after == before.replace("allowed_users = []", "allowed_users = [4]")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[telegram]\nallowed_users = [1]\n", "already names [1]"),
        ("telegram = { allowed_users = [] }\n", "by hand"),
        ("[[telegram]]\nallowed_users = []\n", "by hand"),
        ("[telegram\nallowed_users = []\n", "not valid TOML"),
    ],
)
def test_what_cannot_be_edited_safely_is_refused_with_what_to_do(text: str, problem: str) -> None:
    with pytest.raises(ConfigEditError, match=problem.replace("[", r"\[").replace("]", r"\]")):
        with_owner(text, 12)


@pytest.mark.parametrize("bad", [0, -5, True, "123"])
def test_only_a_positive_integer_id_is_written(bad: object) -> None:
    with pytest.raises(ConfigEditError, match="not a Telegram user id"):
        with_owner(INSTALLED, bad)  # type: ignore[arg-type]


def test_the_file_is_replaced_with_its_mode_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(INSTALLED)
    os.chmod(config, 0o640)
    inode = config.stat().st_ino
    add_owner(config, 123456)
    assert config.read_text() == INSTALLED.replace("= []", "= [123456]")
    st = config.stat()
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_uid == os.getuid()
    assert st.st_ino != inode  # renamed over, never written in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_a_missing_config_is_created_private(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    add_owner(config, 9)
    assert config.read_text() == "[telegram]\nallowed_users = [9]\n"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600


def test_a_symlinked_config_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.toml"
    target.write_text(INSTALLED)
    config = tmp_path / "config.toml"
    config.symlink_to(target)
    with pytest.raises(ConfigEditError, match="symlink"):
        add_owner(config, 1)
    assert target.read_text() == INSTALLED and config.is_symlink()


def test_a_refused_edit_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[telegram]\nallowed_users = [5]\n")
    with pytest.raises(ConfigEditError):
        add_owner(config, 6)
    assert config.read_text() == "[telegram]\nallowed_users = [5]\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
