"""Settings: one TOML file plus ``SHELLDON_<SECTION>_<KEY>`` environment overrides.

The file is ``--config``, else ``$SHELLDON_CONFIG``, else ``<home>/config.toml`` (optional);
home is ``$SHELLDON_HOME`` or ``~/.shelldon``. Every key has a default that works on a fresh
machine. Policy numbers (ceilings, caps, thresholds) are read here, once, and passed down.
A bad file or value raises ``ConfigError`` naming the key; the CLI prints it and exits 2.

Secrets never live in ``Settings``: see ``shelldon.secrets``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROVIDERS = ("anthropic", "openai", "scripted")
FALLBACK_PROVIDERS = ("", "anthropic", "openai")
KEY_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
"""A secret's file name: one path component, never ``..`` or a hidden file."""
SANDBOX_MODES = ("required", "best-effort", "off")
SANDBOX_FS_LAYERS = ("auto", "landlock", "userns", "none")
SANDBOX_PIDNS = ("auto", "off")
VISION_MODES = ("auto", "on", "off")
RETIRED_SECTIONS = {
    "actors": "the [actors] section is gone: every actor runs in the service's one process "
    "(no base to choose, no admin port); delete the section",
}
"""Sections that existed once, refused with what to do instead of a bare "unknown section"."""


class ConfigError(ValueError):
    """A config file or value is unusable; ``key`` names it (``section.key``)."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"config: {key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True, slots=True)
class TelegramSettings:
    """How to reach the Bot API and who may talk to the pet."""

    api_base: str = "https://api.telegram.org"
    allowed_users: tuple[int, ...] = ()
    poll_timeout_s: int = 30


@dataclass(frozen=True, slots=True)
class FallbackSettings:
    """``[brain.fallback]``: the provider a turn's remaining calls go to once the main one is
    unreachable, overloaded, out of quota or refusing its key (``provider = ""``: none)."""

    provider: str = ""
    model: str = ""
    base_url: str = ""
    # The secret's file name (vault or LoadCredential); "" = the provider's usual one.
    key: str = ""
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0

    @property
    def key_name(self) -> str:
        """The secret the fallback's key is read from."""
        return self.key or f"{self.provider}_api_key"


@dataclass(frozen=True, slots=True)
class BrainSettings:
    """Which model provider to use and how."""

    provider: str = "scripted"
    model: str = "claude-sonnet-4-5"
    base_url: str = ""
    script: str = ""
    max_tokens: int = 1024
    persona: str = "You are shelldon, a small, curious pet agent living on a Raspberry Pi."
    # What this provider and model cost, per million input / output tokens (0: not known);
    # /usage shows the cost of the calls they made.
    price_in_per_mtok: float = 0.0
    price_out_per_mtok: float = 0.0
    fallback: FallbackSettings = field(default_factory=FallbackSettings)


@dataclass(frozen=True, slots=True)
class LimitsSettings:
    """Ceilings and caps: the policy that bounds every turn and every child process."""

    max_tool_executions: int = 6
    turn_timeout_s: float = 25.0
    bail_margin_s: float = 2.0
    kill_grace_s: float = 3.0
    daily_turn_budget: int = 48
    approval_ttl_s: int = 3600
    strike_threshold: int = 3
    rlimit_as_mb: int = 1024
    rlimit_cpu_s: int = 30
    eval_timeout_s: float = 2.0
    gate_timeout_s: float = 30.0
    shell_timeout_s: float = 20.0
    max_tool_output_chars: int = 16000
    max_queue: int = 8
    history_chars: int = 6000
    max_repair_rounds: int = 2
    repair_report_chars: int = 3000
    repair_code_chars: int = 16000


@dataclass(frozen=True, slots=True)
class SandboxSettings:
    """Kernel confinement mode: required, best-effort or off."""

    mode: str = "best-effort"
    # auto picks the strongest filesystem layer; landlock|userns|none forces one (tests).
    fs: str = "auto"
    # auto gives each worker and gate run a PID namespace of its own where the kernel allows;
    # off does not (tests of the fallback: a subreaper sweep, the cgroup).
    pidns: str = "auto"
    # A cgroup v2 directory for per-turn cgroups; empty: the systemd-delegated one, if any.
    cgroup: str = ""
    # Each turn's (and gate run's) cgroup, and all of them together under the delegated
    # "turns" cgroup: with the unit's MemoryHigh=320M, the service's own processes keep
    # 160 MB, so a runaway turn meets its own limit long before the service's.
    memory_max_mb: int = 128
    pids_max: int = 64
    turns_memory_max_mb: int = 160
    turns_pids_max: int = 80


@dataclass(frozen=True, slots=True)
class PhotosSettings:
    """Photos the owner sends: whether the model is shown them, and the caps on each one."""

    # auto: on for Anthropic's own API (its current models all take images), off for every
    # other server (GLM through base_url, OpenAI-compatible ones): whether that model sees
    # is the owner's word ("on").
    vision: str = "auto"
    max_px: int = 1280  # the longest side of the Telegram size chosen (and of an image file)
    max_bytes: int = 5_000_000  # Anthropic's own per-image limit
    fetch_timeout_s: float = 20.0  # getFile and the download together

    def enabled(self, brain: BrainSettings | FallbackSettings) -> bool:
        """Whether photos go to ``brain``'s model (else: the text-only reply)."""
        if self.vision == "auto":
            anthropic_api = brain.base_url.rstrip("/") in ("", "https://api.anthropic.com")
            return brain.provider == "anthropic" and anthropic_api
        return self.vision == "on"


@dataclass(frozen=True, slots=True)
class Settings:
    """All of shelldon's settings, with the paths derived from ``home``."""

    home: Path
    config_path: Path | None = None
    telegram: TelegramSettings = field(default_factory=TelegramSettings)
    brain: BrainSettings = field(default_factory=BrainSettings)
    limits: LimitsSettings = field(default_factory=LimitsSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    photos: PhotosSettings = field(default_factory=PhotosSettings)

    @property
    def config_file(self) -> Path:
        """The config file in use, or where the default one goes (``shelldon pair`` writes it)."""
        return self.config_path or self.home / "config.toml"

    @property
    def workspace(self) -> Path:
        """Root of the tool jail: what tools may read and (once approved) write."""
        return self.home / "workspace"

    @property
    def toolbox(self) -> Path:
        """The self-coded tools (live, kept tests, quarantine, staging), outside the workspace:
        written only by ``shelldon.toolbox.toolbox``, never by a worker or a gate run."""
        return self.home / "toolbox"

    @property
    def live_tools(self) -> Path:
        """The live self-coded tools and their manifest: the one part of the toolbox a worker
        may read (read-only)."""
        return self.toolbox / "live"

    @property
    def vault(self) -> Path:
        """Directory of secret files (one value per file)."""
        return self.home / "vault"

    @property
    def database(self) -> Path:
        """The sqlite store."""
        return self.home / "shelldon.db"


_SECTIONS: dict[str, type[Any]] = {
    "telegram": TelegramSettings,
    "brain": BrainSettings,
    "limits": LimitsSettings,
    "sandbox": SandboxSettings,
    "photos": PhotosSettings,
}

_SUBSECTIONS: dict[str, type[Any]] = {"brain.fallback": FallbackSettings}
"""Tables inside a section (``[brain.fallback]``); their overrides are
``SHELLDON_BRAIN_FALLBACK_<KEY>``."""


def default_home(environ: Mapping[str, str]) -> Path:
    """``$SHELLDON_HOME`` or ``~/.shelldon``."""
    raw = environ.get("SHELLDON_HOME")
    return Path(raw).expanduser() if raw else Path.home() / ".shelldon"


def _coerce(key: str, kind: str, value: Any, *, from_env: bool) -> Any:
    """Turn a TOML value (or an environment string) into the field's type, or say why not."""
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        return value
    if kind in ("int", "float"):
        number, expected = (int, "an integer") if kind == "int" else (float, "a number")
        if from_env:
            try:
                return number(value)
            except ValueError:
                raise ConfigError(key, f"expected {expected}, got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, number)):
            raise ConfigError(key, f"expected {expected}, got {value!r}")
        return number(value)
    if kind == "tuple[int, ...]":
        items: list[Any]
        if from_env:
            items = [p.strip() for p in str(value).split(",") if p.strip()]
            try:
                return tuple(int(p) for p in items)
            except ValueError:
                raise ConfigError(
                    key, f"expected comma-separated integers, got {value!r}"
                ) from None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise ConfigError(key, f"expected a list of integers, got {value!r}")
        return tuple(value)
    raise ConfigError(key, f"unsupported setting type {kind}")  # pragma: no cover


def _build_section(name: str, table: Mapping[str, Any], environ: Mapping[str, str]) -> Any:
    cls = _SECTIONS.get(name) or _SUBSECTIONS[name]
    known = {f.name: f for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for key, value in table.items():
        if key not in known:
            raise ConfigError(f"{name}.{key}", f"unknown key (known: {', '.join(known)})")
        if f"{name}.{key}" in _SUBSECTIONS:
            if not isinstance(value, dict):
                raise ConfigError(f"{name}.{key}", f"must be a table ([{name}.{key}])")
            continue
        values[key] = _coerce(f"{name}.{key}", str(known[key].type), value, from_env=False)
    for key, f in known.items():
        if f"{name}.{key}" in _SUBSECTIONS:
            values[key] = _build_section(f"{name}.{key}", table.get(key, {}), environ)
            continue
        env_name = f"SHELLDON_{name.replace('.', '_').upper()}_{key.upper()}"
        if env_name in environ:
            values[key] = _coerce(env_name, str(f.type), environ[env_name], from_env=True)
    return cls(**values)


_MAY_BE_ZERO = frozenset(
    {
        "brain.price_in_per_mtok",
        "brain.price_out_per_mtok",
        "limits.bail_margin_s",
        "limits.kill_grace_s",
        "limits.max_repair_rounds",
    }
)
"""The numbers with rules of their own (in ``_validate``); every other one must be above 0."""


def _validate(s: Settings) -> None:
    choices = {
        "brain.provider": (s.brain.provider, PROVIDERS),
        "sandbox.mode": (s.sandbox.mode, SANDBOX_MODES),
        "sandbox.pidns": (s.sandbox.pidns, SANDBOX_PIDNS),
        "photos.vision": (s.photos.vision, VISION_MODES),
        "sandbox.fs": (s.sandbox.fs, SANDBOX_FS_LAYERS),
    }
    for key, (chosen, allowed) in choices.items():
        if chosen not in allowed:
            raise ConfigError(key, f"{chosen!r} is not one of {', '.join(allowed)}")
    if not s.telegram.api_base.startswith(("http://", "https://")):
        raise ConfigError("telegram.api_base", "must start with http:// or https://")
    if s.brain.base_url and not s.brain.base_url.startswith(("http://", "https://")):
        raise ConfigError("brain.base_url", "must start with http:// or https://")
    for name, cls in _SECTIONS.items():
        for f in dataclasses.fields(cls):
            key, value = f"{name}.{f.name}", getattr(getattr(s, name), f.name)
            if f.type in ("int", "float") and key not in _MAY_BE_ZERO and value <= 0:
                raise ConfigError(key, f"must be greater than 0, got {value}")
    lim = s.limits
    if lim.bail_margin_s < 0 or lim.bail_margin_s >= lim.turn_timeout_s:
        raise ConfigError("limits.bail_margin_s", "must be >= 0 and below limits.turn_timeout_s")
    if lim.kill_grace_s < 0:
        raise ConfigError("limits.kill_grace_s", "must be >= 0")
    for where, priced in (("brain", s.brain), ("brain.fallback", s.brain.fallback)):
        for key in ("price_in_per_mtok", "price_out_per_mtok"):
            price = getattr(priced, key)
            if not math.isfinite(price) or price < 0:
                raise ConfigError(
                    f"{where}.{key}", f"must be a price >= 0 (0: not known), got {price}"
                )
    _validate_fallback(s.brain)
    if lim.max_repair_rounds < 0:
        raise ConfigError("limits.max_repair_rounds", "must be >= 0 (0: never offer a fix)")


def _validate_fallback(brain: BrainSettings) -> None:
    fb = brain.fallback
    if fb.provider not in FALLBACK_PROVIDERS:
        raise ConfigError(
            "brain.fallback.provider",
            f'{fb.provider!r} is not one of anthropic, openai (or "" for no fallback)',
        )
    if not fb.provider:
        return
    if not fb.model:
        raise ConfigError("brain.fallback.model", "a fallback provider needs its model")
    if fb.base_url and not fb.base_url.startswith(("http://", "https://")):
        raise ConfigError("brain.fallback.base_url", "must start with http:// or https://")
    if not KEY_NAME.match(fb.key_name) or fb.key_name == "telegram_token":
        raise ConfigError(
            "brain.fallback.key",
            f"{fb.key!r} is not a secret's file name (lower-case letters, digits, _ . -)",
        )
    main = (brain.provider, brain.model, brain.base_url, f"{brain.provider}_api_key")
    if (fb.provider, fb.model, fb.base_url, fb.key_name) == main:
        raise ConfigError(
            "brain.fallback", "is the main provider again: it would fail when the main does"
        )


NOT_SETTINGS = frozenset({"SHELLDON_HOME", "SHELLDON_CONFIG", "SHELLDON_LOGGING"})
"""``SHELLDON_`` variables that are read but are not ``SHELLDON_<SECTION>_<KEY>`` overrides."""


def _override_keys(section: str) -> list[str]:
    """The ``<KEY>`` parts (lower case) of section's overrides, a subsection's keys included
    (``fallback_provider``)."""
    keys = []
    for f in dataclasses.fields(_SECTIONS[section]):
        sub = _SUBSECTIONS.get(f"{section}.{f.name}")
        if sub is None:
            keys.append(f.name)
        else:
            keys += [f"{f.name}_{g.name}" for g in dataclasses.fields(sub)]
    return keys


def _check_override_names(environ: Mapping[str, str]) -> None:
    """Refuse a ``SHELLDON_<SECTION>_<KEY>`` that names no setting, as a typo in the config file
    is refused: a misspelt override must not be silently ignored. Variables whose first part is
    no section nor close to one (``SHELLDON_HOME``, a test's own) are not overrides."""
    for var in environ:
        if not var.startswith("SHELLDON_") or var in NOT_SETTINGS:
            continue
        section, _, key = var.removeprefix("SHELLDON_").lower().partition("_")
        if section in RETIRED_SECTIONS:
            raise ConfigError(var, RETIRED_SECTIONS[section])
        if section in _SECTIONS:
            keys = _override_keys(section)
            if key not in keys:
                near = difflib.get_close_matches(key, keys, n=1)
                hint = (
                    f"did you mean SHELLDON_{section.upper()}_{near[0].upper()}? " if near else ""
                )
                raise ConfigError(
                    var, f"no such setting {section}.{key}; {hint}(known: {', '.join(keys)})"
                )
            continue
        near = difflib.get_close_matches(section, _SECTIONS, n=1, cutoff=0.75)
        if near:
            raise ConfigError(
                var,
                f"no such section {section!r}: did you mean SHELLDON_{near[0].upper()}_"
                f"{key.upper()}?",
            )


def load_settings(
    path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Read the config file (if any) and the environment overrides into ``Settings``."""
    env = os.environ if environ is None else environ
    home = default_home(env)
    explicit = path if path is not None else env.get("SHELLDON_CONFIG")
    config_path = Path(explicit).expanduser() if explicit else home / "config.toml"
    data: dict[str, Any] = {}
    if config_path.exists():
        try:
            data = tomllib.loads(config_path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(str(config_path), f"not valid TOML: {exc}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(str(config_path), f"cannot read: {exc}") from None
    elif explicit:
        raise ConfigError(str(config_path), "config file does not exist")
    else:
        config_path = None  # type: ignore[assignment]
    for name in data:
        if name in RETIRED_SECTIONS:
            raise ConfigError(name, RETIRED_SECTIONS[name])
        if name not in _SECTIONS:
            raise ConfigError(name, f"unknown section (known: {', '.join(_SECTIONS)})")
        if not isinstance(data[name], dict):
            raise ConfigError(name, "must be a table ([section])")
    _check_override_names(env)
    sections = {name: _build_section(name, data.get(name, {}), env) for name in _SECTIONS}
    settings = Settings(home=home, config_path=config_path, **sections)
    _validate(settings)
    return settings


def allowed_users_now(
    settings: Settings, environ: Mapping[str, str] | None = None
) -> tuple[int, ...]:
    """``allowed_users`` as a restart would read it now: how a service started with no owner
    learns the one ``shelldon pair`` wrote into its config file, without a restart. A file that
    cannot be read or is not valid (an edit under way) names nobody yet."""
    path = settings.config_file
    try:
        return load_settings(path if path.exists() else None, environ).telegram.allowed_users
    except ConfigError:
        return ()
