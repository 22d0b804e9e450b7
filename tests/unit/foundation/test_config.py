"""Config: defaults that work, TOML + environment overrides, one clear line for bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from shelldon.config import ConfigError, load_settings


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_fresh_machine_defaults_work(tmp_path: Path) -> None:
    s = load_settings(environ={"SHELLDON_HOME": str(tmp_path / "h")})
    assert s.home == tmp_path / "h"
    assert s.workspace == tmp_path / "h" / "workspace"
    assert s.vault == tmp_path / "h" / "vault"
    assert s.database == tmp_path / "h" / "shelldon.db"
    assert s.limits.max_tool_executions == 6
    assert s.limits.turn_timeout_s == 25.0
    assert s.limits.approval_ttl_s == 3600
    assert s.limits.strike_threshold == 3
    assert s.config_path is None


def test_home_config_file_is_read(tmp_path: Path) -> None:
    write(
        tmp_path / "config.toml",
        '[brain]\nprovider = "openai"\nmodel = "gpt-x"\n'
        "[telegram]\nallowed_users = [42, 7]\n[limits]\nturn_timeout_s = 20\n",
    )
    s = load_settings(environ={"SHELLDON_HOME": str(tmp_path)})
    assert s.brain.provider == "openai"
    assert s.brain.model == "gpt-x"
    assert s.telegram.allowed_users == (42, 7)
    assert s.limits.turn_timeout_s == 20.0
    assert s.config_path == tmp_path / "config.toml"


def test_explicit_path_beats_shelldon_config_beats_home(tmp_path: Path) -> None:
    write(tmp_path / "config.toml", '[brain]\nmodel = "home"\n')
    env_cfg = write(tmp_path / "env.toml", '[brain]\nmodel = "env"\n')
    arg_cfg = write(tmp_path / "arg.toml", '[brain]\nmodel = "arg"\n')
    env = {"SHELLDON_HOME": str(tmp_path), "SHELLDON_CONFIG": str(env_cfg)}
    assert load_settings(environ=env).brain.model == "env"
    assert load_settings(arg_cfg, environ=env).brain.model == "arg"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    write(tmp_path / "config.toml", "[limits]\ndaily_turn_budget = 10\n")
    env = {
        "SHELLDON_HOME": str(tmp_path),
        "SHELLDON_LIMITS_DAILY_TURN_BUDGET": "3",
        "SHELLDON_TELEGRAM_ALLOWED_USERS": "1, 2",
        "SHELLDON_LIMITS_TURN_TIMEOUT_S": "12.5",
        "SHELLDON_BRAIN_PROVIDER": "anthropic",
        "SHELLDON_BRAIN_PRICE_OUT_PER_MTOK": "15",
    }
    s = load_settings(environ=env)
    assert (s.brain.price_in_per_mtok, s.brain.price_out_per_mtok) == (0.0, 15.0)
    assert s.limits.daily_turn_budget == 3
    assert s.telegram.allowed_users == (1, 2)
    assert s.limits.turn_timeout_s == 12.5
    assert s.brain.provider == "anthropic"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[brain\n", "config.toml"),
        ('[brain]\nprovider = "gpt"\n', "brain.provider"),
        ('[limits]\nmax_tool_executions = "six"\n', "limits.max_tool_executions"),
        ("[limits]\nmax_tool_executions = true\n", "limits.max_tool_executions"),
        ("[limits]\nmax_tool_executions = 0\n", "limits.max_tool_executions"),
        ("[limits]\nturn_timeout_s = -1\n", "limits.turn_timeout_s"),
        ("[limits]\nbail_margin_s = 30\n", "limits.bail_margin_s"),
        ("[limits]\nnope = 1\n", "limits.nope"),
        ("[nosuch]\nx = 1\n", "nosuch"),
        ("brain = 3\n", "brain"),
        ('[telegram]\nallowed_users = ["me"]\n', "telegram.allowed_users"),
        ('[telegram]\napi_base = "ftp://x"\n', "telegram.api_base"),
        ('[sandbox]\nmode = "maybe"\n', "sandbox.mode"),
        ("[brain]\nprice_in_per_mtok = -3\n", "brain.price_in_per_mtok"),
        ("[brain]\nprice_out_per_mtok = nan\n", "brain.price_out_per_mtok"),
        ('[brain]\nprice_out_per_mtok = "$15"\n', "brain.price_out_per_mtok"),
        ("[brain]\nprice_per_mtok = 3\n", "brain.price_per_mtok"),
        ('[brain]\nfallback = "openai"\n', "brain.fallback"),
        ('[brain.fallback]\nprovider = "scripted"\nmodel = "m"\n', "brain.fallback.provider"),
        ('[brain.fallback]\nprovider = "openai"\n', "brain.fallback.model"),
        ('[brain.fallback]\nprovider = "openai"\nmodel = "m"\nkey = "../x"\n', "fallback.key"),
        ('[brain.fallback]\nprovider = "openai"\nmodel = "m"\nbase_url = "x"\n', "base_url"),
        ("[brain.fallback]\nmodle = 1\n", "brain.fallback.modle"),
        ("[brain.fallback]\nprice_in_per_mtok = -1\n", "brain.fallback.price_in_per_mtok"),
        (
            '[brain]\nprovider = "openai"\nmodel = "m"\n'
            '[brain.fallback]\nprovider = "openai"\nmodel = "m"\n',
            "is the main provider again",
        ),
    ],
)
def test_bad_file_names_the_key(tmp_path: Path, text: str, key: str) -> None:
    write(tmp_path / "config.toml", text)
    with pytest.raises(ConfigError) as err:
        load_settings(environ={"SHELLDON_HOME": str(tmp_path)})
    assert key in str(err.value)


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("SHELLDON_LIMITS_MAX_TOOL_EXECUTIONS", "many"),
        ("SHELLDON_LIMITS_TURN_TIMEOUT_S", "soon"),
        ("SHELLDON_TELEGRAM_ALLOWED_USERS", "1,bob"),
    ],
)
def test_bad_environment_value_names_the_variable(tmp_path: Path, var: str, value: str) -> None:
    with pytest.raises(ConfigError, match=var):
        load_settings(environ={"SHELLDON_HOME": str(tmp_path), var: value})


def test_a_fallback_provider_is_read_from_its_table_and_the_environment(tmp_path: Path) -> None:
    write(
        tmp_path / "config.toml",
        '[brain]\nprovider = "anthropic"\n'
        '[brain.fallback]\nprovider = "openai"\nmodel = "gpt-4o-mini"\n'
        'base_url = "https://openrouter.ai/api/v1"\nkey = "openrouter_api_key"\n',
    )
    env = {"SHELLDON_HOME": str(tmp_path), "SHELLDON_BRAIN_FALLBACK_PRICE_IN_PER_MTOK": "0.15"}
    fb = load_settings(environ=env).brain.fallback
    assert (fb.provider, fb.model, fb.key_name) == ("openai", "gpt-4o-mini", "openrouter_api_key")
    assert fb.price_in_per_mtok == 0.15
    # Without a key name the provider's usual secret is used; without a table, no fallback.
    assert (
        load_settings(environ={"SHELLDON_HOME": str(tmp_path / "none")}).brain.fallback.provider
        == ""
    )
    env = {
        "SHELLDON_HOME": str(tmp_path / "e"),
        "SHELLDON_BRAIN_FALLBACK_PROVIDER": "anthropic",
        "SHELLDON_BRAIN_FALLBACK_MODEL": "claude-haiku-4-5",
    }
    assert load_settings(environ=env).brain.fallback.key_name == "anthropic_api_key"


def test_a_misspelt_fallback_override_is_refused(tmp_path: Path) -> None:
    env = {"SHELLDON_HOME": str(tmp_path), "SHELLDON_BRAIN_FALLBACK_MODL": "m"}
    with pytest.raises(ConfigError, match="SHELLDON_BRAIN_FALLBACK_MODEL"):
        load_settings(environ=env)


def test_missing_explicit_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml", environ={"SHELLDON_HOME": str(tmp_path)})


def test_cli_exits_2_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    cfg = write(tmp_path / "c.toml", "[limits]\nstrike_threshold = 'x'\n")
    proc = subprocess.run(
        [sys.executable, "-m", "shelldon", "--config", str(cfg), "doctor"],
        capture_output=True,
        text=True,
        timeout=30,
        env={"SHELLDON_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "limits.strike_threshold" in lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("var", "says"),
    [
        ("SHELLDON_BRAIN_PROVDER", "did you mean SHELLDON_BRAIN_PROVIDER?"),
        ("SHELLDON_LIMITS_TURN_TIMEOUT", "did you mean SHELLDON_LIMITS_TURN_TIMEOUT_S?"),
        ("SHELLDON_TELEGRAM_TOKEN", "no such setting telegram.token"),
        ("SHELLDON_BRAINN_PROVIDER", "no such section 'brainn': did you mean SHELLDON_BRAIN_"),
        ("SHELLDON_SANDBX_MODE", "did you mean SHELLDON_SANDBOX_MODE?"),
    ],
)
def test_a_misspelt_environment_override_is_refused_like_a_config_typo(
    tmp_path: Path, var: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=var) as caught:
        load_settings(environ={"SHELLDON_HOME": str(tmp_path), var: "x"})
    assert says in str(caught.value)


@pytest.mark.parametrize(
    "var", ["SHELLDON_HOME", "SHELLDON_CONFIG", "SHELLDON_LOGGING", "SHELLDON_SYSTEM_TESTS"]
)
def test_variables_that_are_not_overrides_are_left_alone(tmp_path: Path, var: str) -> None:
    write(tmp_path / "x", "")
    env = {"SHELLDON_HOME": str(tmp_path), var: str(tmp_path / "x")}
    assert load_settings(environ=env).brain.provider == "scripted"  # read, nothing refused
