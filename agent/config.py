"""Configuration: YAML (+ environment, files, systemd credentials) -> typed, validated settings.

Errors name the file, the line and the key, and say how to fix it. Secrets
(the vast.ai key, the model key) never live in the YAML: it names where they
come from (an environment variable, a file, a systemd credential), and they
are resolved into ``Secret`` objects that never print.

Search order: ``--config PATH``, ``$FLEET_AGENT_CONFIG``, ``./config.yaml``,
``/etc/fleet-agent/config.yaml``.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import os
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.errors import ConfigError
from agent.secrets import Secret

SEARCH_PATHS = ("./config.yaml", "/etc/fleet-agent/config.yaml")


class Duration(float):
    """Seconds; written in YAML as a number or as '30s', '5m', '2h', '1d'."""


_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


@dataclass(frozen=True)
class SecretRef:
    """Where a secret comes from. The value itself is never in the YAML."""

    env: str | None = None
    file: str | None = None
    credential: str | None = None


# ------------------------------------------------------------------ the settings


@dataclass(frozen=True)
class LoggingSettings:
    level: str = "info"  # debug | info | warning | error
    format: str = "auto"  # auto (console on a TTY, JSON otherwise) | json | console


@dataclass(frozen=True)
class ScheduleSettings:
    interval: Duration = Duration(300)
    cron: str | None = None
    jitter: Duration = Duration(0)
    misfire_grace: Duration = Duration(120)
    max_steps: int = 8
    tick_timeout: Duration = Duration(600)
    stop_deadline: Duration = Duration(60)


@dataclass(frozen=True)
class VastSettings:
    url: str = "https://console.vast.ai"
    api_key_env: str | None = "VAST_API_KEY"
    api_key_file: str | None = None
    api_key_credential: str | None = "vast_api_key"
    timeout: Duration = Duration(30)
    max_attempts: int = 3


@dataclass(frozen=True)
class DemandSettings:
    url: str | None = None


@dataclass(frozen=True)
class ModelSettings:
    provider: str = "openai"  # openai | rules
    base_url: str = "http://127.0.0.1:8000/v1"
    name: str = "qwen2.5-32b-instruct"
    api_key_env: str | None = "OPENAI_API_KEY"
    api_key_file: str | None = None
    api_key_credential: str | None = "model_api_key"
    timeout: Duration = Duration(60)
    temperature: float = 0.2
    max_output_tokens: int = 2048
    max_retries: int = 1


@dataclass(frozen=True)
class ContextSettings:
    budget_tokens: int = 30000
    output_reserve: int = 2048
    high_water: float = 0.8
    low_water: float = 0.3
    encoding: str = "cl100k_base"
    encoding_file: str | None = None
    encoding_sha256: str | None = None
    summary_max_tokens: int = 2000
    knowledge_max_tokens: int = 3000
    pinned_max_tokens: int = 8000
    tool_output_max_tokens: int = 1500
    calibration_margin: float = 0.05


@dataclass(frozen=True)
class FleetSettings:
    label_prefix: str = "fa-"
    image: str = "ghcr.io/example/prover:1.4.2"
    onstart: str = "/opt/prover/start.sh"
    env: dict[str, str] = field(default_factory=dict)
    disk_gb: float = 40.0
    runtype: str = "ssh"
    search_limit: int = 10


@dataclass(frozen=True)
class PolicySettings:
    max_instances: int = 8
    max_total_dph: float = 12.0
    max_dph_per_instance: float = 2.5
    allowed_gpus: list[str] = field(default_factory=lambda: ["RTX 4090", "RTX 3090", "L40S", "A100 SXM4"])
    min_reliability: float = 0.95
    max_rents_per_hour: int = 6
    max_destroys_per_hour: int = 12
    destroy_orphans: bool = False
    dry_run: bool = False


@dataclass(frozen=True)
class AlertSettings:
    stuck_after: Duration = Duration(1200)
    low_balance: float = 25.0
    failed_ticks: int = 3
    policy_blocks: int = 5
    notify_command: str | None = None
    notify_timeout: Duration = Duration(10)


@dataclass(frozen=True)
class Settings:
    agent_id: str = "fleet-1"
    data_dir: str = "./fleet-data"
    knowledge_dir: str = "./knowledge"
    prompts_dir: str | None = None
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    vast: VastSettings = field(default_factory=VastSettings)
    demand: DemandSettings = field(default_factory=DemandSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    policy: PolicySettings = field(default_factory=PolicySettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    # Where this came from (not a YAML key).
    source_path: str | None = field(default=None, compare=False, metadata={"internal": True})

    # -------------------------------------------------------------- derived

    @property
    def base_dir(self) -> Path:
        return Path(self.source_path).resolve().parent if self.source_path else Path.cwd()

    def path(self, p: str) -> Path:
        q = Path(os.path.expandvars(os.path.expanduser(p)))
        return q if q.is_absolute() else (self.base_dir / q)

    @property
    def data_path(self) -> Path:
        return self.path(self.data_dir)

    @property
    def db_path(self) -> Path:
        return self.data_path / "fleet-agent.store.db"

    @property
    def knowledge_path(self) -> Path:
        return self.path(self.knowledge_dir)

    @property
    def prompts_path(self) -> Path | None:
        return self.path(self.prompts_dir) if self.prompts_dir else None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source_path", None)
        return d

    def config_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True, default=str).encode()).hexdigest()

    def vast_api_key(self, env: typing.Mapping[str, str] | None = None) -> Secret:
        v = self.vast
        return resolve_secret("vast.api_key", SecretRef(v.api_key_env, v.api_key_file, v.api_key_credential),
                              self, env, required=True)  # type: ignore[return-value]

    def model_api_key(self, env: typing.Mapping[str, str] | None = None) -> Secret | None:
        m = self.model
        return resolve_secret("model.api_key", SecretRef(m.api_key_env, m.api_key_file, m.api_key_credential),
                              self, env, required=False)


# ------------------------------------------------------------------ secrets


def resolve_secret(name: str, ref: SecretRef, settings: Settings, env: typing.Mapping[str, str] | None,
                   *, required: bool) -> Secret | None:
    env = os.environ if env is None else env
    if ref.env and env.get(ref.env):
        return Secret(env[ref.env].strip(), f"${ref.env}")
    if ref.file:
        p = settings.path(ref.file)
        try:
            value = p.read_text(encoding="utf-8").strip()
        except OSError as e:
            raise ConfigError(f"{name}: cannot read the key file {p}: {e.strerror}; "
                              f"fix the path in {name}_file or the file's permissions") from None
        if value:
            return Secret(value, str(p))
    cred_dir = env.get("CREDENTIALS_DIRECTORY")
    if ref.credential and cred_dir:
        p = Path(cred_dir) / ref.credential
        if p.is_file():
            value = p.read_text(encoding="utf-8").strip()
            if value:
                return Secret(value, f"credential {ref.credential}")
    if not required:
        return None
    ways = []
    if ref.env:
        ways.append(f"set ${ref.env}")
    ways.append(f"set {name}_file to a file holding the key")
    if ref.credential:
        ways.append(f"under systemd, LoadCredential={ref.credential}:/path")
    raise ConfigError(f"{name}: no key found; " + ", or ".join(ways))


# ------------------------------------------------------------------ YAML with line numbers


class _Loc:
    """Line numbers for each key path of a YAML document."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[tuple[str, ...], int] = {}

    def at(self, path: tuple[str, ...]) -> str:
        while path and path not in self.lines:
            path = path[:-1]
        line = self.lines.get(path)
        return f"{self.file}:{line}" if line else self.file


def _to_python(node: yaml.Node, path: tuple[str, ...], loc: _Loc) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for k, v in node.value:
            key = yaml.safe_load(yaml.serialize(k)) if not isinstance(k, yaml.ScalarNode) else k.value
            key = str(key)
            loc.lines[path + (key,)] = k.start_mark.line + 1
            if key in out:
                raise ConfigError(f"{loc.file}:{k.start_mark.line + 1}: {'.'.join(path + (key,))}: "
                                  "the key appears twice; keep one")
            out[key] = _to_python(v, path + (key,), loc)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [_to_python(v, path + (str(i),), loc) for i, v in enumerate(node.value)]
    return yaml.safe_load(yaml.serialize(node))


def _parse_yaml(text: str, file: str) -> tuple[dict[str, Any], _Loc]:
    loc = _Loc(file)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        started = ""
        if e.context and e.context_mark and mark and e.context_mark.line != mark.line:
            started = f" ({e.context} started at line {e.context_mark.line + 1})"
        raise ConfigError(f"{file}{line}: not valid YAML: {e.problem or e.context}{started}; "
                          "fix the syntax there") from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        raise ConfigError(f"{file}:{line}: not valid YAML: {e.reason} (character {e.character!r}); "
                          "remove that character or save the file as plain UTF-8 text") from None
    except yaml.YAMLError as e:
        one_line = " ".join(str(e).split())
        raise ConfigError(f"{file}: not valid YAML: {one_line}") from None
    if node is None:
        return {}, loc
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{file}:{node.start_mark.line + 1}: the top level must be a mapping of settings "
                          "(key: value), see config.example.yaml")
    return _to_python(node, (), loc), loc


# ------------------------------------------------------------------ validation

_SECRET_KEYS = {"api_key", "key", "token", "password", "secret"}


def _type_name(t: Any) -> str:
    if t is Duration:
        return "a duration (seconds, or like 30s, 5m, 2h)"
    origin = typing.get_origin(t)
    if origin in (types.UnionType, typing.Union):
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return f"{_type_name(args[0])} or null"
    if origin is list:
        return "a list of strings"
    if origin is dict:
        return "a mapping of string to string"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(t, str(t))


def _coerce(value: Any, t: Any, where: str, key: str) -> Any:
    bad = ConfigError(f"{where}: {key}: expected {_type_name(t)}, got {value!r}"[:300])
    origin = typing.get_origin(t)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None
        args = [a for a in typing.get_args(t) if a is not type(None)]
        return _coerce(value, args[0], where, key)
    if t is Duration:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, int | float):
            if value < 0:
                raise bad
            return Duration(value)
        if isinstance(value, str) and (m := _DUR.match(value)):
            return Duration(float(m.group(1)) * _UNITS[m.group(2)])
        raise bad
    if t is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if t is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise bad
    if t is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise bad
    if t is str:
        if isinstance(value, str):
            return value
        raise bad
    if origin is list:
        if isinstance(value, list) and all(isinstance(x, str) for x in value):
            return list(value)
        raise bad
    if origin is dict:
        if isinstance(value, dict) and all(isinstance(v, str | int | float) and not isinstance(v, bool)
                                           for v in value.values()):
            return {str(k): str(v) for k, v in value.items()}
        raise bad
    raise bad


def _build(cls: type, data: Any, path: tuple[str, ...], loc: _Loc) -> Any:
    dotted = ".".join(path) or "(top level)"
    if not isinstance(data, dict):
        raise ConfigError(f"{loc.at(path)}: {dotted}: expected a mapping of settings, got {data!r}"[:300])
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    kwargs = {}
    for key, value in data.items():
        kpath = path + (key,)
        kd = ".".join(kpath)
        if key not in fields:
            if key in _SECRET_KEYS or key.endswith("_key") and key not in fields:
                raise ConfigError(f"{loc.at(kpath)}: {kd}: secrets never go in the config file; "
                                  f"name where the key comes from with {key}_env, {key}_file or "
                                  f"{key}_credential instead")
            near = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
            hint = f"did you mean {'.'.join(path + (near[0],))!r}?" if near else \
                f"valid keys here: {', '.join(sorted(fields))}"
            raise ConfigError(f"{loc.at(kpath)}: {kd}: unknown key; {hint}")
        t = hints[key]
        if dataclasses.is_dataclass(t):
            kwargs[key] = _build(t, value if value is not None else {}, kpath, loc)
        else:
            kwargs[key] = _coerce(value, t, loc.at(kpath), kd)
    return cls(**kwargs)


def _check(s: Settings, loc: _Loc) -> None:
    def err(path: str, msg: str) -> ConfigError:
        return ConfigError(f"{loc.at(tuple(path.split('.')))}: {path}: {msg}")

    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", s.agent_id):
        raise err("agent_id", "use 1-31 lowercase letters, digits and dashes (it becomes part of instance labels)")
    if s.logging.level not in ("debug", "info", "warning", "error"):
        raise err("logging.level", "one of debug, info, warning, error")
    if s.logging.format not in ("auto", "json", "console"):
        raise err("logging.format", "one of auto, json, console")
    if s.model.provider not in ("openai", "rules"):
        raise err("model.provider", "one of 'openai' (any OpenAI-compatible server) or 'rules' "
                  "(the built-in rules provider)")
    c = s.context
    if not 0 < c.low_water < c.high_water <= 1:
        raise err("context.high_water", "needs 0 < context.low_water < context.high_water <= 1")
    if c.output_reserve >= c.budget_tokens // 2:
        raise err("context.output_reserve", f"must be under half of context.budget_tokens ({c.budget_tokens})")
    if c.budget_tokens < 2000:
        raise err("context.budget_tokens", "must be at least 2000")
    if s.schedule.interval < 1 and not s.schedule.cron:
        raise err("schedule.interval", "must be at least 1s")
    if s.schedule.max_steps < 1:
        raise err("schedule.max_steps", "must be at least 1")
    if s.schedule.cron is not None and len(s.schedule.cron.split()) != 5:
        raise err("schedule.cron", "a cron expression has 5 fields, e.g. '*/5 * * * *'")
    if not re.fullmatch(r"[a-z0-9-]{1,16}", s.fleet.label_prefix):
        raise err("fleet.label_prefix", "use 1-16 lowercase letters, digits and dashes")
    for key, v in (("policy.max_instances", s.policy.max_instances),
                   ("policy.max_rents_per_hour", s.policy.max_rents_per_hour),
                   ("policy.max_destroys_per_hour", s.policy.max_destroys_per_hour),
                   ("vast.max_attempts", s.vast.max_attempts)):
        if v < 0:
            raise err(key, "must not be negative")
    if not 0 <= s.policy.min_reliability <= 1:
        raise err("policy.min_reliability", "a share between 0 and 1")
    for u, key in ((s.vast.url, "vast.url"), (s.model.base_url, "model.base_url"), (s.demand.url, "demand.url")):
        if u is not None and not re.match(r"^https?://", u):
            raise err(key, "must start with http:// or https://")


def parse(text: str, file: str = "<config>") -> Settings:
    data, loc = _parse_yaml(text, file)
    s = _build(Settings, data, (), loc)
    _check(s, loc)
    return dataclasses.replace(s, source_path=None if file.startswith("<") else file)


def find_config(explicit: str | None, env: typing.Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if explicit:
        p = Path(explicit)
        if not p.is_file():
            raise ConfigError(f"{explicit}: no such config file; create one with 'fleet-agent init' "
                              "or copy config.example.yaml")
        return p
    if env.get("FLEET_AGENT_CONFIG"):
        p = Path(env["FLEET_AGENT_CONFIG"])
        if not p.is_file():
            raise ConfigError(f"$FLEET_AGENT_CONFIG={p}: no such file")
        return p
    for cand in SEARCH_PATHS:
        if Path(cand).is_file():
            return Path(cand)
    raise ConfigError("no config file found (looked at --config, $FLEET_AGENT_CONFIG, "
                      f"{', '.join(SEARCH_PATHS)}); run 'fleet-agent init' to create one")


def load(explicit: str | None = None, env: typing.Mapping[str, str] | None = None) -> Settings:
    p = find_config(explicit, env)
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text; save the config as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror}") from None
    return parse(text, str(p))


def example_text() -> str:
    from importlib import resources

    return resources.files("agent").joinpath("config.example.yaml").read_text(encoding="utf-8")
