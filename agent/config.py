"""Configuration: YAML (+ environment, files, systemd credentials) -> typed, validated settings.

The file is read by PyYAML (libyaml's loader when it is there) into a node tree that gives each key its
line, and validated by pydantic against the dataclasses below. Errors name the file, the line and the
key, and say how to fix it. Secrets (the vast.ai key, the model key) never live in the YAML: it names
where they come from (an environment variable, a file, a systemd credential), and they are resolved
into ``Secret`` objects that never print.

Search order: ``--config PATH``, ``$FLEET_AGENT_CONFIG``, ``./config.yaml``,
``/etc/fleet-agent/config.yaml``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import ipaddress
import json
import math
import os
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn, TypeAlias

from agent.errors import ConfigError, UsageError
from agent.secrets import Secret
from agent.times import parse_duration

if TYPE_CHECKING:
    import yaml
    from apscheduler.triggers.cron import CronTrigger
    from pydantic import (
        BeforeValidator,
        ConfigDict,
        Field,
        GetCoreSchemaHandler,
        StrictBool,
        StrictFloat,
        StrictInt,
        StrictStr,
        TypeAdapter,
        ValidationError,
    )
    from pydantic_core import core_schema

SEARCH_PATHS = ("./config.yaml", "/etc/fleet-agent/config.yaml")

# The daemon schedules in UTC; a cron expression is read in it.
SCHEDULE_TIMEZONE = UTC

# A config is a few KiB; anything this large is refused before it is read.
MAX_BYTES = 1 << 20
# A config is a few levels of key: value; deeper nesting is refused.
MAX_DEPTH = 16

# Settings with a fixed set of values: checked when the config loads.
LogLevel = Literal["debug", "info", "warning", "error"]
# auto: console on a TTY, JSON lines otherwise
LogFormat = Literal["auto", "json", "console"]
# what a tool call written as text gets besides a correction
TextToolCalls = Literal["reject", "accept"]
# any OpenAI-compatible server, or the built-in rules provider
ProviderName = Literal["openai", "rules"]

# Every section refuses keys it does not know (the YAML is validated against it once, at load; code that
# builds or replaces settings itself is not re-validated).
_SECTION: ConfigDict = {"extra": "forbid", "allow_inf_nan": False}


# ------------------------------------------------------------------ where the log lives
# ``storage.url`` becomes a SQLite file (a ``Path``) or a fleet in a PostgreSQL database (``PgTarget``);
# ``EventLog`` takes either. No database driver is imported here.

PG_SCHEMES = ("postgresql", "postgres")
# As text: compiled (and cached by re) when a PostgreSQL target is first made; every command that opens a
# SQLite log imports this module.
_AGENT_ID = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"


def is_pg_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in PG_SCHEMES and "://" in url


def url_problem(url: str) -> str | None:
    """Why ``url`` is not a usable ``postgresql://`` URL (a password in it included), or None."""
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
    except ValueError as e:
        return f"not a URL ({e}); write postgresql://USER@HOST:PORT/DATABASE"
    if u.password is not None:
        return ("a password in the URL is refused (it would sit in the config and in every message that names "
                "the URL); remove it and set storage.password_env, storage.password_file or "
                "storage.password_credential")
    if not u.path.strip("/"):
        return "the URL names no database; write postgresql://USER@HOST:PORT/DATABASE"
    return None


@dataclass(frozen=True)
class PgTarget:
    """One fleet's log in a PostgreSQL database.

    ``url`` holds no password (refused by ``url_problem``); ``password`` comes from the environment, a
    file or a systemd credential. ``state_dir``, when given, holds the local head and checkpoint files
    (the same truncation evidence and verification checkpoint a SQLite log keeps beside its file)."""

    url: str
    agent_id: str
    password: Secret | None = field(default=None, repr=False)
    state_dir: Path | None = None

    def __post_init__(self) -> None:
        problem = url_problem(self.url)
        if problem is not None:
            raise ConfigError(f"storage.url: {problem}")
        if not re.match(_AGENT_ID, self.agent_id):
            raise ConfigError(f"agent_id {self.agent_id!r}: use letters, digits, '.', '_' or '-' (at most 63), "
                              "starting with a letter or digit")

    def __str__(self) -> str:
        return f"{self.url} (fleet {self.agent_id})"

    @property
    def head_file(self) -> Path | None:
        return None if self.state_dir is None else self.state_dir / f"pg-{self.agent_id}.head"

    @property
    def checkpoint_file(self) -> Path | None:
        return None if self.state_dir is None else self.state_dir / f"pg-{self.agent_id}.verified"


LogLocation: TypeAlias = "Path | PgTarget"


_SECONDS = re.compile(r"\s*\d+(?:\.\d+)?\s*")


def _duration(text: str) -> float:
    """Seconds of a duration written as text: a number with an optional unit (30s, 5m, 2h, 1d, 1w; also ms);
    a ValueError when it is not written so. The one place config reads a duration."""
    if _SECONDS.fullmatch(text):  # a bare number is seconds in the config
        return float(text)
    try:
        return parse_duration(text, allow_zero=True).total_seconds()
    except UsageError:
        raise ValueError(f"{text!r} is not a duration") from None


def _to_duration(v: object) -> Duration:
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0:
        return Duration(v)
    if isinstance(v, str):
        return Duration(_duration(v))
    raise ValueError("not a duration")


class Duration(float):
    """Seconds; written in YAML as a number or as '30s', '5m', '2h', '1d', '1w'."""

    @classmethod
    def __get_pydantic_core_schema__(cls, source: object, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(_to_duration)


def _env_text(v: object) -> object:
    """fleet.env's values as text: a number is written as YAML reads it (anything else is left to fail)."""
    if isinstance(v, dict):
        return {str(k): str(x) if isinstance(x, int | float) and not isinstance(x, bool) else x
                for k, x in v.items()}
    return v


if TYPE_CHECKING:
    # vast.ai host ids
    HostId = Annotated[StrictInt, Field(gt=0)]
    EnvVars = Annotated[dict[StrictStr, StrictStr], BeforeValidator(_env_text)]


# What the settings' annotations and the validation below take from pydantic (imported as one by ``_libs``).
_PYDANTIC_NAMES = ("BeforeValidator", "ConfigDict", "Field", "GetCoreSchemaHandler", "StrictBool", "StrictFloat",
                   "StrictInt", "StrictStr", "TypeAdapter", "ValidationError")


@functools.cache
def _libs() -> None:
    """Import PyYAML and pydantic into this module's namespace, where the settings' annotations (strings, read
    by pydantic when it builds a validator) and the reader find them: the first config parsed does, so importing
    this module (every command does) loads neither, and a command served a cached config never does."""
    import pydantic
    import pydantic_core
    import yaml

    g = globals()
    g.update({name: getattr(pydantic, name) for name in _PYDANTIC_NAMES},
             yaml=yaml, core_schema=pydantic_core.core_schema)
    g["HostId"] = Annotated[pydantic.StrictInt, pydantic.Field(gt=0)]  # vast.ai host ids
    g["EnvVars"] = Annotated[dict[pydantic.StrictStr, pydantic.StrictStr], pydantic.BeforeValidator(_env_text)]


@dataclass(frozen=True)
class SecretRef:
    """Where a secret comes from. The value itself is never in the YAML."""

    env: str | None = None
    file: str | None = None
    credential: str | None = None


class _KeyFrom:
    """A section that names where its API key comes from (each dataclass declares the three fields)."""

    api_key_env: str | None
    api_key_file: str | None
    api_key_credential: str | None

    @property
    def key_ref(self) -> SecretRef:
        """Where to look: the environment variable, else the file, else the systemd credential."""
        return SecretRef(self.api_key_env, self.api_key_file, self.api_key_credential)


# ------------------------------------------------------------------ the settings


@dataclass(frozen=True)
class LoggingSettings:
    """``logging:`` how much the daemon says, and in which form."""

    __pydantic_config__ = _SECTION

    level: LogLevel = "info"
    format: LogFormat = "auto"


@dataclass(frozen=True)
class ScheduleSettings:
    """``schedule:`` when ticks run and how long they may take."""

    __pydantic_config__ = _SECTION

    # Either every `interval`, or at the times of a 5-field `cron` expression (UTC) when set.
    interval: Duration = Duration(300)
    cron: StrictStr | None = None
    jitter: Duration = Duration(0)
    misfire_grace: Duration = Duration(120)
    # Each tick: at most this many model calls, within this wall-clock budget.
    max_steps: StrictInt = 8
    tick_timeout: Duration = Duration(600)
    # On SIGTERM, how long the running step may take to finish.
    stop_deadline: Duration = Duration(60)

    def longest_gap_s(self) -> float:
        """The longest wait between two ticks: the interval, or the longest gap between a cron expression's runs
        over two weeks, so a weekly pattern's gap across its weekend is seen (a week when it runs at most once
        in one)."""
        return float(self.interval) if not self.cron else _cron_longest_gap(self.cron)


@functools.lru_cache(maxsize=8)
def _cron_longest_gap(expr: str) -> float:
    from datetime import datetime, timedelta

    week = 7 * 86400.0
    trig = cron_trigger(expr)
    t = start = datetime(2026, 1, 5, tzinfo=SCHEDULE_TIMEZONE)
    prev, gap = None, 0.0
    for _ in range(14 * 24 * 60 + 1):  # a cron expression runs at most once a minute
        t = trig.get_next_fire_time(prev, t)
        if t is None or (t - start).total_seconds() > 2 * week:
            break
        if prev is not None:
            gap = max(gap, (t - prev).total_seconds())
        prev, t = t, t + timedelta(seconds=1)
    return gap or week


@dataclass(frozen=True)
class VastSettings(_KeyFrom):
    """``vast:`` the vast.ai API and where its key comes from."""

    __pydantic_config__ = _SECTION

    url: StrictStr = "https://console.vast.ai"
    # The key: from this environment variable, else this file, else this systemd credential.
    api_key_env: StrictStr | None = "VAST_API_KEY"
    api_key_file: StrictStr | None = None
    api_key_credential: StrictStr | None = "vast_api_key"
    # Per request; reads are retried on 429, 5xx and timeouts. A call that changes the fleet is
    # sent once (again only when the connection was refused before sending); an unknown outcome
    # is settled by looking.
    timeout: Duration = Duration(30)
    max_attempts: StrictInt = 3
    # vast.ai limits each endpoint per key as a minimum interval between requests and sends no
    # Retry-After: two requests to one endpoint start at least this far apart (0 = no pacing).
    min_interval: Duration = Duration(0.6)
    # A rent whose outcome is unknown counts as live until its label is listed, or until this
    # long has passed and at least two listings lacked it ("not created").
    settle_after: Duration = Duration(300)


@dataclass(frozen=True)
class DemandSettings:
    """``demand:`` the job queue whose pending count says how much capacity is wanted."""

    __pydantic_config__ = _SECTION

    url: StrictStr | None = None


def _price_text(v: object) -> object:
    """``model.price: gpt-4o`` is ``model.price: {preset: gpt-4o}``."""
    return {"preset": v} if isinstance(v, str) else v


@dataclass(frozen=True)
class PriceSettings:
    """``model.price:`` dollars per million tokens, for the model cost that status, spend, the console and
    /metrics show (agent/price.py)."""

    __pydantic_config__ = _SECTION

    # A preset's list prices (agent.price.PRESETS); null: the preset named like model.name, if any.
    preset: StrictStr | None = None
    # Rates given override the preset's; with no preset, input and output are needed (cached_input
    # defaults to input). Nothing set and no preset: a local model, $0.
    input: StrictFloat | None = None
    cached_input: StrictFloat | None = None
    output: StrictFloat | None = None


@dataclass(frozen=True)
class ModelSettings(_KeyFrom):
    """``model:`` the model that decides, its server, its key and its sampling settings."""

    __pydantic_config__ = _SECTION

    provider: ProviderName = "openai"
    base_url: StrictStr = "http://127.0.0.1:8000/v1"
    name: StrictStr = "qwen2.5-32b-instruct"
    # An optional key, looked for in the same order as vast's.
    api_key_env: StrictStr | None = "OPENAI_API_KEY"
    api_key_file: StrictStr | None = None
    api_key_credential: StrictStr | None = "model_api_key"
    timeout: Duration = Duration(60)
    temperature: StrictFloat = 0.2
    max_output_tokens: StrictInt = 2048
    max_retries: StrictInt = 1
    retry_timeouts: StrictBool = False
    text_tool_calls: TextToolCalls = "reject"
    price: Annotated[PriceSettings, BeforeValidator(_price_text)] = field(default_factory=PriceSettings)


@dataclass(frozen=True)
class ContextSettings:
    """``context:`` the token budget of each request and when the conversation is compacted."""

    __pydantic_config__ = _SECTION

    budget_tokens: StrictInt = 30000
    output_reserve: StrictInt = 2048
    # Compact above high_water x budget, down to low_water x budget.
    high_water: StrictFloat = 0.8
    low_water: StrictFloat = 0.3
    # Token counting: a tiktoken encoding by name, or a local file checked against its sha256.
    encoding: StrictStr = "cl100k_base"
    encoding_file: StrictStr | None = None
    encoding_sha256: StrictStr | None = None
    # Caps: the rolling summary, each knowledge file, the pinned block, one tool output.
    summary_max_tokens: StrictInt = 2000
    knowledge_max_tokens: StrictInt = 3000
    pinned_max_tokens: StrictInt = 8000
    tool_output_max_tokens: StrictInt = 1500
    calibration_margin: StrictFloat = 0.05
    # At a compaction, tool outputs older than the newest this many ticks become one-line stubs (0 = never).
    mask_after_ticks: StrictInt = 3
    # The facts block (hosts' failures and refusals, GPU prices seen) after the summary.
    facts_max_tokens: StrictInt = 400
    # Caps of the pinned block's own blocks (knowledge files share what is left of pinned_max_tokens).
    directives_max_tokens: StrictInt = 2000
    memory_max_tokens: StrictInt = 2000
    # A request over the budget first folds the newest tick's floods: past this many system messages of one
    # kind (an alert, a destroy, a late result, ...), the rest become one digest naming them (0 = never fold).
    flood_keep: StrictInt = 3


PROMPT_AND_TOOLS_TOKENS = 3000   # the shipped system prompt with a policy (~800) and the tool schemas (~2,000)
TICK_BASE_TOKENS = 800           # a tick's observation and the model's turns, besides its tool outputs


def smallest_budget(c: ContextSettings) -> int:
    """The smallest ``budget_tokens`` that holds, under high water and with the output reserve, the system
    prompt and tool schemas, the pinned block, the summary and the facts at their caps, and one tick (two tool
    outputs at their cap): below it a request is trimmed before compaction can make room."""
    need = (PROMPT_AND_TOOLS_TOKENS + c.pinned_max_tokens + c.summary_max_tokens + c.facts_max_tokens
            + 2 * c.tool_output_max_tokens + TICK_BASE_TOKENS)
    return math.ceil(max(need / c.high_water, need + c.output_reserve))


def budget_problem(c: ContextSettings) -> str | None:
    """Why ``c``'s budget cannot work (what it must hold, the smallest that works), or None."""
    low = smallest_budget(c)
    if c.budget_tokens >= low:
        return None
    return (f"context.budget_tokens {c.budget_tokens:,} cannot hold the pinned block (context.pinned_max_tokens "
            f"{c.pinned_max_tokens:,}), the summary ({c.summary_max_tokens:,}) and facts ({c.facts_max_tokens:,}), "
            f"the system prompt and tool schemas (about {PROMPT_AND_TOOLS_TOKENS:,}) and one tick "
            f"({2 * c.tool_output_max_tokens + TICK_BASE_TOKENS:,}) under context.high_water ({c.high_water:g}) "
            f"with context.output_reserve ({c.output_reserve:,}); the smallest budget that works with these caps is "
            f"{low:,}: raise context.budget_tokens to {low:,}, or lower the caps (pinned_max_tokens, "
            "summary_max_tokens, tool_output_max_tokens)")


@dataclass(frozen=True)
class FleetSettings:
    """``fleet:`` what runs on every rented machine (the model cannot change it)."""

    __pydantic_config__ = _SECTION

    label_prefix: StrictStr = "fa-"
    image: StrictStr = "ghcr.io/example/prover:1.4.2"
    onstart: StrictStr = "/opt/prover/start.sh"
    env: EnvVars = field(default_factory=dict)
    disk_gb: StrictFloat = 40.0
    runtype: StrictStr = "ssh"
    search_limit: StrictInt = 10  # offers search_offers shows the model


@dataclass(frozen=True)
class PolicySettings:
    """``policy:`` the limits code enforces on every call that changes the fleet."""

    __pydantic_config__ = _SECTION

    max_instances: StrictInt = 8
    max_total_dph: StrictFloat = 12.0
    max_dph_per_instance: StrictFloat = 2.5
    allowed_gpus: list[StrictStr] = field(default_factory=lambda: ["RTX 4090", "RTX 3090", "L40S", "A100 SXM4"])
    min_reliability: StrictFloat = 0.95
    max_rents_per_hour: StrictInt = 6
    max_destroys_per_hour: StrictInt = 12
    # Instances with our label that no event knows about: destroyed, or (false) only alerted on.
    destroy_orphans: StrictBool = False
    dry_run: StrictBool = False
    # Spend budgets in dollars per UTC day / calendar month, from the log's rental history (None: off).
    max_daily_spend: StrictFloat | None = None
    max_monthly_spend: StrictFloat | None = None
    # vast.ai host ids never rented on; operators and the model add more through the log.
    excluded_hosts: list[HostId] = field(default_factory=list)
    # A host whose instances of ours failed twice within a day is excluded for this long (0: never).
    host_failure_exclusion: Duration = Duration(86400)
    # No rent at or below this credit (dollars): vast.ai refuses rents with HTTP 402 and stops every
    # instance at $0 (agent/feedback/credit.py).
    credit_reserve: StrictFloat = 2.0
    # Interruptible (bid) instances (tools/fleet.py, agent/fleet/market.py, agent/model/bidding.py): on, rents and
    # re-bids follow one rule, min_bid + 5 % capped at max_bid_share x the on-demand price (on-demand where the
    # min_bid is above the cap); an outbid instance (its work lost) is rebid by the rule, else kept until the
    # market falls back; bids are lowered when the market falls.
    interruptible: StrictBool = False
    max_bid_share: StrictFloat = 0.7
    # A host's price increase on a running instance is accepted up to this share (0.15 = +15 %); above it
    # it is rejected and the instance replaced.
    max_price_increase: StrictFloat = 0.15
    # Offers whose contract would end within this many hours are not shown nor rented, and the observation
    # shows an instance's end (contract or maintenance window) once it is this near (agent/fleet/contracts.py);
    # vast.ai stops an instance for good at its end date. 0: off.
    contract_min_hours: StrictFloat = 24.0
    # An instance facing its end keeps working until this many hours before it; then it stops counting as
    # capacity (its replacement is rented) and is drained (agent/fleet/drain.py). Never under two ticks.
    retire_ahead_hours: StrictFloat = 1.0
    # Jobs an hour one GPU delivers, assumed until the fleet's own instances have shown what a model
    # delivers (agent/fleet/throughput.py); per GPU model where known, else the one figure.
    jobs_per_hour: StrictFloat = 8.0
    jobs_per_hour_by_gpu: dict[StrictStr, StrictFloat] = field(default_factory=dict)
    # vast.ai's dlperf (per GPU) of the GPU jobs_per_hour is for: a model with no figure of its own is assumed
    # to do jobs_per_hour x its dlperf / this until one is measured (60: about an RTX 4090). 0: the flat figure.
    jobs_per_hour_dlperf: StrictFloat = 60.0
    # The backlog the fleet is sized to clear within this long, on top of what keeps arriving.
    drain_within: Duration = Duration(3600)


@dataclass(frozen=True)
class AlertSettings:
    """``alerts:`` when an alert opens, and the command told about it."""

    __pydantic_config__ = _SECTION

    stuck_after: Duration = Duration(1200)
    low_balance: StrictFloat = 25.0
    failed_ticks: StrictInt = 3
    policy_blocks: StrictInt = 5
    # New alerts the model may open in one tick; repeats of live alerts are not counted.
    max_new_per_tick: StrictInt = 3
    # Ticks in a row without a tool call (while there is work) before "the model has not acted" opens.
    idle_ticks: StrictInt = 6
    # Ticks in a row with jobs waiting and the queue not draining before "demand:unmet" opens, naming
    # the cause (a cap, a restriction, the market, credit, a pause); 0 = off.
    unmet_after: StrictInt = 3
    # Runs off the tick's path with a minimal environment (agent/feedback/alert_hook.py).
    notify_command: StrictStr | None = None
    notify_timeout: Duration = Duration(10)
    # An open alert nobody acked is notified again this long after its last notification.
    repeat_after: Duration = Duration(4 * 3600)


@dataclass(frozen=True)
class HttpSettings:
    """``http:`` the metrics, health and console endpoint the daemon (and ``fleet-agent web``) serves."""

    __pydantic_config__ = _SECTION

    # HOST:PORT to listen on; null = no HTTP endpoint.
    listen: StrictStr | None = "127.0.0.1:9464"
    # Writes (ack, note) need this token, as a bearer header or through the login form. Without one the
    # console is read-only; listening beyond loopback without one is refused.
    token_file: StrictStr | None = None
    token_credential: StrictStr | None = None
    # The operator name recorded on every action taken with the token.
    token_name: StrictStr = "web"
    # Host names the console answers to besides IP addresses and localhost (e.g. fleet.example.com, or
    # .example.com for every name under it). A request naming any other host is refused, so a page that
    # rebinds its own DNS name to this address cannot read the console.
    allowed_hosts: list[StrictStr] = field(default_factory=list)

    @property
    def token_ref(self) -> SecretRef:
        """Where the token comes from: the file, else the systemd credential (never the environment)."""
        return SecretRef(None, self.token_file, self.token_credential)


@dataclass(frozen=True)
class StorageSettings:
    """``storage:`` where the event log lives (a SQLite file, the default, or a PostgreSQL database), and
    its tiers: old months move into sealed segment files (agent/store/archive.py)."""

    __pydantic_config__ = _SECTION

    # null: fleet-agent.db in data_dir. A path: that SQLite file. postgresql://USER@HOST:PORT/DATABASE:
    # this fleet's log in that database (several fleets may share it); never a password in the URL.
    url: StrictStr | None = None
    # The PostgreSQL role's password: from this environment variable, else this file, else this systemd
    # credential (none found: the server must not ask for one, e.g. a Unix socket with peer auth).
    password_env: StrictStr | None = "FLEET_AGENT_PG_PASSWORD"
    password_file: StrictStr | None = None
    password_credential: StrictStr | None = "pg_password"
    # A standby daemon (``fleet-agent run --standby``) takes over within this long of the active one
    # dying or hanging (its heartbeat ages past it; on PostgreSQL its lock session ends at half of it).
    failover_seconds: Duration = Duration(30)
    # The log's tiers (agent/store/archive.py): old months move into sealed segment files.
    # Events older than this and covered by a summary move into one segment per month; null = never.
    archive_after: Duration | None = None
    # A copy of every segment on object storage (s3://bucket/prefix) or in a directory (file:///path).
    archive_url: StrictStr | None = None
    # For S3-compatible stores other than AWS (MinIO, ...): the endpoint; and the region.
    s3_endpoint_url: StrictStr | None = None
    s3_region: StrictStr | None = None
    # The access key pair: from these environment variables, else files, else systemd credentials.
    # Both unset: boto3's own chain (instance role, ~/.aws).
    s3_access_key_id_env: StrictStr | None = "AWS_ACCESS_KEY_ID"
    s3_access_key_id_file: StrictStr | None = None
    s3_access_key_id_credential: StrictStr | None = None
    s3_secret_access_key_env: StrictStr | None = "AWS_SECRET_ACCESS_KEY"
    s3_secret_access_key_file: StrictStr | None = None
    s3_secret_access_key_credential: StrictStr | None = None

    @property
    def is_pg(self) -> bool:
        return self.url is not None and is_pg_url(self.url)

    @property
    def password_ref(self) -> SecretRef:
        return SecretRef(self.password_env, self.password_file, self.password_credential)


@dataclass(frozen=True)
class Settings:
    """The whole configuration file, validated; paths resolve against the file's directory."""

    __pydantic_config__ = _SECTION

    agent_id: StrictStr = "fleet-1"
    data_dir: StrictStr = "./fleet-data"
    knowledge_dir: StrictStr = "./knowledge"
    prompts_dir: StrictStr | None = None
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    schedule: ScheduleSettings = field(default_factory=ScheduleSettings)
    vast: VastSettings = field(default_factory=VastSettings)
    demand: DemandSettings = field(default_factory=DemandSettings)
    model: ModelSettings = field(default_factory=ModelSettings)
    context: ContextSettings = field(default_factory=ContextSettings)
    fleet: FleetSettings = field(default_factory=FleetSettings)
    policy: PolicySettings = field(default_factory=PolicySettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    # Where this came from (not a YAML key).
    source_path: str | None = field(default=None, compare=False, metadata={"internal": True})

    # -------------------------------------------------------------- derived

    def retire_ahead_s(self) -> float:
        """How long before an instance stops working (its contract's end, its machine's maintenance window) it is
        drained and its replacement rented: ``policy.retire_ahead_hours``, never under two of the schedule's
        longest waits between ticks (one sees it coming and rents, the next rents again should that start fail)
        nor beyond ``policy.contract_min_hours`` (0: ends are not looked at)."""
        horizon = float(self.policy.contract_min_hours) * 3600.0
        return min(horizon, max(float(self.policy.retire_ahead_hours) * 3600.0, 2.0 * self.schedule.longest_gap_s()))

    @property
    def base_dir(self) -> Path:
        return Path(self.source_path).resolve().parent if self.source_path else Path.cwd()

    def path(self, p: str) -> Path:
        """``p`` with ``~`` and ``$VAR`` expanded, resolved against the config file's directory."""
        q = Path(os.path.expandvars(os.path.expanduser(p)))
        return q if q.is_absolute() else self.base_dir / q

    @property
    def data_path(self) -> Path:
        return self.path(self.data_dir)

    def path_text(self, p: str) -> str:
        return str(self.path(p))

    @property
    def db_file(self) -> str:
        """``str(self.db_path)`` (what a command opens the log with)."""
        return str(self.db_path)

    @property
    def db_path(self) -> Path:
        """The SQLite database file (``storage.url`` when it is a path; unused when it is PostgreSQL)."""
        if self.storage.url is not None and not self.storage.is_pg:
            return self.path(self.storage.url)
        return self.data_path / "fleet-agent.db"

    def log_target(self, env: Mapping[str, str] | None = None) -> LogLocation:
        """Where the event log lives: the SQLite file, or this fleet in the PostgreSQL database (with the
        password from storage.password_env / _file / _credential, and the head and checkpoint files
        kept in data_dir)."""
        if not self.storage.is_pg:
            return self.db_path
        assert self.storage.url is not None
        pw = find_secret("storage.password", self.storage.password_ref, self, env)
        return PgTarget(self.storage.url, self.agent_id, password=pw, state_dir=self.data_path)

    @property
    def log_location(self) -> str:
        """The log's location for messages: the file, or the URL and fleet (never a password)."""
        if not self.storage.is_pg:
            return self.db_file
        return f"{self.storage.url} (fleet {self.agent_id})"

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

    def vast_api_key(self, env: Mapping[str, str] | None = None) -> Secret:
        """The vast.ai key (required: a ConfigError says every way to provide it)."""
        ref = self.vast.key_ref
        return find_secret("vast.api_key", ref, self, env) or _no_key("vast.api_key", ref)

    def model_api_key(self, env: Mapping[str, str] | None = None) -> Secret | None:
        """The model server's key, or None (many local servers need none)."""
        return find_secret("model.api_key", self.model.key_ref, self, env)

    def s3_credentials(self, env: Mapping[str, str] | None = None) -> tuple[Secret, Secret] | None:
        """The object store's key pair, or None (boto3's own chain then); a ConfigError when only one is found."""
        st = self.storage
        key_id = find_secret("storage.s3_access_key_id", SecretRef(
            st.s3_access_key_id_env, st.s3_access_key_id_file, st.s3_access_key_id_credential), self, env)
        secret = find_secret("storage.s3_secret_access_key", SecretRef(
            st.s3_secret_access_key_env, st.s3_secret_access_key_file, st.s3_secret_access_key_credential), self, env)
        if (key_id is None) != (secret is None):
            missing = "storage.s3_secret_access_key" if secret is None else "storage.s3_access_key_id"
            raise ConfigError(f"{missing}: not found, but the other half of the S3 key pair is; provide both "
                              "(environment variable, file or systemd credential) or neither")
        return None if key_id is None or secret is None else (key_id, secret)

    def http_token(self, env: Mapping[str, str] | None = None) -> Secret | None:
        """The console's write token: None when none is configured; a ConfigError when one is configured
        and cannot be found (a console that should accept writes must not silently refuse them all)."""
        ref = self.http.token_ref
        if ref.file is None and ref.credential is None:
            return None
        token = find_secret("http.token", ref, self, env)
        if token is None:
            where = " or ".join(x for x in (f"the file {self.path(ref.file)}" if ref.file else "",
                                            f"the credential {ref.credential}" if ref.credential else "") if x)
            raise ConfigError(f"http.token: no token found in {where}; write the token there "
                              "(one line), or set http.token_file and http.token_credential to null")
        if len(token.reveal()) < 16:
            raise ConfigError(f"http.token: the token from {token.origin} is shorter than 16 characters; "
                              "use a long random one, e.g. from 'openssl rand -hex 32'")
        return token


# ------------------------------------------------------------------ secrets


def find_secret(name: str, ref: SecretRef, settings: Settings,
                env: Mapping[str, str] | None) -> Secret | None:
    """The first of ``ref``'s places that holds a value, or None; an unreadable key file is an error."""
    env = os.environ if env is None else env
    if ref.env and env.get(ref.env):
        return Secret(_one_line(name, env[ref.env], f"${ref.env}"), f"${ref.env}")
    if ref.file:
        p = settings.path(ref.file)
        _warn_key_file(name, p)
        value = _read_key(name, p, f"fix the path in {name}_file or the file's permissions")
        if value:
            return Secret(_one_line(name, value, str(p)), str(p))
    cred_dir = env.get("CREDENTIALS_DIRECTORY")
    if ref.credential and cred_dir:
        p = Path(cred_dir) / ref.credential
        if p.is_file():
            value = _read_key(name, p, f"fix the file behind LoadCredential={ref.credential}")
            if value:
                return Secret(_one_line(name, value, f"credential {ref.credential}"), f"credential {ref.credential}")
    return None


def _read_key(name: str, p: Path, fix: str) -> str:
    try:
        return p.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        raise ConfigError(f"{name}: the key file {p} is not UTF-8 text; write the key alone on one line") from None
    except OSError as e:
        raise ConfigError(f"{name}: cannot read the key file {p}: {e.strerror}; {fix}") from None


def _one_line(name: str, value: str, where: str) -> str:
    """``value`` stripped; a key that spans lines is refused (a pasted file, not a key)."""
    value = value.strip()
    if "\n" in value or "\r" in value:
        raise ConfigError(f"{name}: {where} holds several lines; a key is one line: keep only the key")
    return value


def _warn_key_file(name: str, p: Path) -> None:
    """Warn (never refuse) about a key file others can read, or one reached through a symlink."""
    from agent import logsetup  # structlog: only when there is something to warn about

    logger = logsetup.get_logger(__name__)
    try:
        if p.is_symlink():
            logger.warning("secret.file_symlink", setting=f"{name}_file", path=str(p),
                           target=os.path.realpath(p), fix="point the setting at the file itself")
        mode = p.stat().st_mode
        if mode & 0o077:
            logger.warning("secret.file_readable_by_others", setting=f"{name}_file", path=str(p),
                           mode=f"{mode & 0o777:o}", fix=f"chmod 600 {p}")
    except OSError:
        return  # a file that cannot be looked at is reported when it is read


def _no_key(name: str, ref: SecretRef) -> NoReturn:
    ways = []
    if ref.env:
        ways.append(f"set ${ref.env}")
    ways.append(f"set {name}_file to a file holding the key")
    if ref.credential:
        ways.append(f"under systemd, LoadCredential={ref.credential}:/path")
    raise ConfigError(f"{name}: no key found; " + ", or ".join(ways))


# ------------------------------------------------------------------ YAML with line numbers


class _Lines:
    """The line of each key path of one config file, for errors that name them."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.lines: dict[tuple[str, ...], int] = {}
        self.failed: str | None = None

    def line(self, path: tuple[str, ...]) -> int:
        """The line of ``path``, or of the nearest key around it that has one (0: none)."""
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path, 0)

    def at(self, path: tuple[str, ...]) -> str:
        line = self.line(path)
        return f"{self.file}:{line}" if line else self.file

    def error(self, dotted: str, msg: str) -> ConfigError:
        """A ConfigError for the setting ``dotted`` (like ``schedule.cron``), at its line; ``failed`` keeps
        ``dotted`` (the partial load sets that part aside)."""
        self.failed = dotted
        return ConfigError(f"{self.at(tuple(dotted.split('.')))}: {dotted}: {msg}")


def _compose(text: str, file: str) -> yaml.Node | None:
    """``text``'s node tree (aliases not expanded); a ConfigError at the line of any syntax error."""
    _libs()
    # libyaml's loader when PyYAML was built with it, else PyYAML's own.
    loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return yaml.compose(text, Loader=loader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = f":{mark.line + 1}" if mark else ""
        started = ""
        if e.context and e.context_mark and mark and e.context_mark.line != mark.line:
            started = f" ({e.context} started at line {e.context_mark.line + 1})"
        raise ConfigError(f"{file}{line}: not valid YAML: {e.problem or e.context}{started}; "
                          "fix the syntax there") from None
    except yaml.reader.ReaderError as e:
        lineno = text.count("\n", 0, e.position) + 1
        char = chr(e.character) if isinstance(e.character, int) else e.character  # (libyaml gives its number)
        raise ConfigError(f"{file}:{lineno}: not valid YAML: {e.reason} (character {char!r}); "
                          "remove that character or save the file as plain UTF-8 text") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{file}: not valid YAML: {' '.join(str(e).split())}; fix the syntax") from None
    except RecursionError:
        raise ConfigError(f"{file}: not valid YAML: nested too deeply; a config is a few levels of "
                          "key: value, see config.example.yaml") from None


class _Reader:
    """A node tree as plain values, noting each key's line. Aliases are refused (a config has no use for
    them, and nested ones expand exponentially: the "billion laughs"), and so is deep nesting."""

    def __init__(self, where: _Lines) -> None:
        self.where = where
        self.seen: set[int] = set()
        self.constructor = yaml.constructor.SafeConstructor()

    def value(self, node: yaml.Node, path: tuple[str, ...]) -> Any:
        dotted = ".".join(path) or "(top level)"
        if id(node) in self.seen:
            raise ConfigError(f"{self.where.at(path)}: {dotted}: anchors (&name) and aliases (*name) are not "
                              "allowed in the config; write each value out")
        self.seen.add(id(node))
        if len(path) > MAX_DEPTH:
            raise ConfigError(f"{self.where.at(path)}: {dotted}: nested too deeply; a config is a few levels "
                              "of key: value, see config.example.yaml")
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            return [self.value(v, path + (str(i),)) for i, v in enumerate(node.value)]
        try:
            return self.constructor.construct_object(node, deep=True)
        except (ValueError, OverflowError) as e:  # e.g. a date like 2026-13-45
            raise ConfigError(f"{self.where.file}:{node.start_mark.line + 1}: {dotted}: {node.value!r} cannot "
                              f"be read ({e}); quote it if it is text") from None
        except yaml.YAMLError as e:  # e.g. an unknown tag
            problem = " ".join(str(getattr(e, "problem", None) or e).split())
            raise ConfigError(f"{self.where.file}:{node.start_mark.line + 1}: {dotted}: not valid YAML: "
                              f"{problem}; fix the value there") from None

    def mapping(self, node: yaml.MappingNode, path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in node.value:
            if not isinstance(k, yaml.ScalarNode):
                raise ConfigError(f"{self.where.file}:{k.start_mark.line + 1}: {'.'.join(path) or '(top level)'}: "
                                  "a key must be a plain name; write key: value")
            key = str(k.value)
            if key in out:
                raise ConfigError(f"{self.where.file}:{k.start_mark.line + 1}: {'.'.join(path + (key,))}: "
                                  "the key appears twice; keep one")
            self.where.lines[path + (key,)] = k.start_mark.line + 1
            out[key] = self.value(v, path + (key,))
        return out


def _read(text: str, where: _Lines) -> dict[str, Any]:
    """``text``'s mapping of settings, the line of each key noted in ``where``."""
    node = _compose(text, where.file)
    if node is None:
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError(f"{where.file}:{node.start_mark.line + 1}: the top level must be a mapping of settings "
                          "(key: value), see config.example.yaml")
    return _Reader(where).mapping(node, ())


# ------------------------------------------------------------------ validation

@functools.cache
def _adapter(cls: type) -> TypeAdapter[Any]:
    """pydantic's validator of section ``cls`` (or of the whole ``Settings``), built when a config is first
    validated: importing this module (the store does, for its paths) builds none."""
    _libs()
    return TypeAdapter(cls)


_SECRET_KEYS = {"api_key", "key", "token", "password", "secret"}
_EXPECTED: dict[object, str] = {
    bool: "true or false", int: "an integer", float: "a number", str: "a string",
    Duration: "a duration (seconds, or like 30s, 5m, 2h, 1d, 1w)",
}


def _keys(cls: type) -> list[str]:
    """The YAML keys of section ``cls``: its fields but internal ones."""
    return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _sections(cls: type) -> dict[str, type]:
    """The fields of ``cls`` that are sections themselves, and their classes."""
    _libs()  # (the annotations name pydantic's types)
    return {k: t for k, t in typing.get_type_hints(cls).items() if isinstance(t, type) and dataclasses.is_dataclass(t)}


def _fill_sections(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with each section written without keys (``alerts:`` alone, null) as an empty one: its defaults."""
    for key, section in _sections(cls).items():
        if key in data and data[key] is None:
            data[key] = {}
        elif isinstance(data.get(key), dict):
            _fill_sections(section, data[key])
    return data


def _unwrap(tp: Any) -> Any:
    return typing.get_args(tp)[0] if typing.get_origin(tp) is Annotated else tp


def _expected(tp: Any) -> str:
    """What a field of type ``tp`` holds, as an error says it."""
    tp = _unwrap(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return _expected(next(a for a in args if a is not type(None))) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is list:
        return "a list of strings" if _unwrap(args[0]) is str else "a list of host ids (whole numbers above 0)"
    if origin is dict:
        return "a mapping of string to string"
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return "a mapping of settings"
    return _EXPECTED[tp]


def _unknown_key(key: str, path: tuple[str, ...], fields: list[str], where: _Lines) -> ConfigError:
    kpath = path + (key,)
    kd = ".".join(kpath)
    if key in _SECRET_KEYS or key.endswith("_key"):
        return ConfigError(f"{where.at(kpath)}: {kd}: secrets never go in the config file; "
                           f"name where the key comes from with {key}_env, {key}_file or "
                           f"{key}_credential instead")
    import difflib  # an error's hint: a command reading a valid config goes without it

    near = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    hint = f"did you mean {'.'.join(path + (near[0],))!r}?" if near else \
        f"valid keys here: {', '.join(sorted(fields))}"
    return ConfigError(f"{where.at(kpath)}: {kd}: unknown key; {hint}")


def _problem(err: Any, data: dict[str, Any], where: _Lines) -> tuple[int, ConfigError]:
    """One of pydantic's errors as (line, the ConfigError that names the key and what it expects)."""
    line, _part, error = _problem_at(err, data, where)
    return line, error


def _problem_at(err: Any, data: dict[str, Any], where: _Lines) -> tuple[int, str, ConfigError]:
    """``_problem`` with the part of the file it is in (the top-level key: a section, or a key of its own)."""
    _libs()
    path: tuple[str, ...] = ()
    cls: type = Settings
    tp: Any = Settings
    value: Any = data
    for part in err["loc"]:
        if not (isinstance(value, dict) and part in value and part in _keys(cls)):
            break
        path, value, tp = path + (part,), value[part], typing.get_type_hints(cls, include_extras=True)[part]
        if dataclasses.is_dataclass(_unwrap(tp)):  # a section read through a validator (model.price)
            tp = _unwrap(tp)
        if not (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
            break
        cls = tp
    if err["type"] == "unexpected_keyword_argument" and tp is cls and len(err["loc"]) > len(path):
        key = str(err["loc"][len(path)])
        return where.line(path + (key,)), (path + (key,))[0], _unknown_key(key, path, _keys(cls), where)
    why = ""
    if isinstance(value, float) and not math.isfinite(value):
        why = "; .nan and .inf are not numbers a setting can hold, write a finite number"
    msg = f"{where.at(path)}: {'.'.join(path)}: expected {_expected(tp)}, got {value!r}"[:300] + why
    return where.line(path), (path or (str(err["loc"][0]) if err["loc"] else "",))[0], ConfigError(msg)


def _validated(data: dict[str, Any], where: _Lines) -> Settings:
    """``data`` as Settings; the error of the first line with a problem when it does not fit."""
    if "source_path" in data:  # (a field, but not a setting)
        raise _unknown_key("source_path", (), _keys(Settings), where)
    try:
        return typing.cast(Settings, _adapter(Settings).validate_python(_fill_sections(Settings, data)))
    except ValidationError as e:
        problems = [_problem(err, data, where) for err in e.errors()]
        raise min(problems, key=lambda p: p[0])[1] from None


def cron_trigger(expr: str) -> CronTrigger:
    """APScheduler's own reading of a 5-field cron expression, in ``SCHEDULE_TIMEZONE``.

    Raises ``ValueError`` saying what is wrong. The config check and the daemon
    both use it, so an expression that loads is one the scheduler accepts.
    """
    from apscheduler.triggers.cron import CronTrigger  # only a config with schedule.cron reads one

    return CronTrigger.from_crontab(expr, timezone=SCHEDULE_TIMEZONE)


def _is_http_url(u: str) -> bool:
    return u.startswith(("http://", "https://"))


def _check_names(s: Settings, loc: _Lines) -> None:
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", s.agent_id):
        raise loc.error("agent_id", "use 1-31 lowercase letters, digits and dashes "
                        "(it becomes part of instance labels)")
    if not re.fullmatch(r"[a-z0-9-]{1,16}", s.fleet.label_prefix):
        raise loc.error("fleet.label_prefix", "use 1-16 lowercase letters, digits and dashes")


def _check_context(c: ContextSettings, loc: _Lines) -> None:
    if not 0 < c.low_water < c.high_water <= 1:
        raise loc.error("context.high_water", "needs 0 < context.low_water < context.high_water <= 1")
    if c.output_reserve >= c.budget_tokens // 2:
        raise loc.error("context.output_reserve",
                        f"must be under half of context.budget_tokens ({c.budget_tokens})")
    if c.budget_tokens < 2000:
        raise loc.error("context.budget_tokens", "must be at least 2000")
    for key in ("directives_max_tokens", "memory_max_tokens"):
        if getattr(c, key) < 100:
            raise loc.error(f"context.{key}", "must be at least 100 tokens")
    if c.facts_max_tokens < 0:
        raise loc.error("context.facts_max_tokens", "must be 0 (no facts block) or a number of tokens")
    if c.mask_after_ticks < 0:
        raise loc.error("context.mask_after_ticks", "must be 0 (never mask) or a number of ticks")
    if c.flood_keep < 0:
        raise loc.error("context.flood_keep", "must be 0 (never fold) or a number of messages")


def _check_price(m: ModelSettings, loc: _Lines) -> None:
    from agent.price import PRESETS, preset_named

    p = m.price
    if p.preset is not None and p.preset not in PRESETS:
        import difflib

        near = difflib.get_close_matches(p.preset, list(PRESETS), n=1, cutoff=0.6)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise loc.error("model.price", f"{p.preset!r} is no preset; {hint}write one of {', '.join(PRESETS)}, or "
                        "the rates: {input: 2.5, cached_input: 1.25, output: 10} (dollars per million tokens)")
    for key in ("input", "cached_input", "output"):
        x = getattr(p, key)
        if x is not None and not 0 <= x <= 1000:
            raise loc.error(f"model.price.{key}", f"must be between 0 and 1000 dollars per million tokens (got "
                            f"{x:g}); e.g. 2.5")
    if p.preset is None and preset_named(m.name) is None and (p.input is None) != (p.output is None):
        missing = "input" if p.input is None else "output"
        raise loc.error("model.price", f"{missing} is not set and {m.name!r} is no preset to take it from; write "
                        f"model.price.{missing} (dollars per million tokens), or model.price.preset")
    if p.input is not None and p.cached_input is not None and p.cached_input > p.input:
        raise loc.error("model.price.cached_input", f"${p.cached_input:g} is above the input rate ${p.input:g}; "
                        "a token served from the cache never costs more, write at most the input rate")


def _check_schedule(sch: ScheduleSettings, loc: _Lines) -> None:
    if sch.interval < 1 and not sch.cron:
        raise loc.error("schedule.interval", "must be at least 1s")
    if sch.max_steps < 1:
        raise loc.error("schedule.max_steps", "must be at least 1")
    if sch.cron is not None:
        try:
            cron_trigger(sch.cron)
        except ValueError as e:
            raise loc.error("schedule.cron", f"{sch.cron!r} is not a valid cron expression ({e}); write 5 "
                            "fields, minute hour day month weekday (UTC), e.g. '*/5 * * * *'") from None


def _check_failover(st: StorageSettings, loc: _Lines) -> None:
    if not 3 <= float(st.failover_seconds) <= 3600:
        raise loc.error("storage.failover_seconds", f"must be between 3s and 1h (got {float(st.failover_seconds):g}s); "
                        "a standby takes over this long after the active daemon stops, e.g. 30s")


def _check_throughput(p: PolicySettings, loc: _Lines) -> None:
    if not p.jobs_per_hour > 0:
        raise loc.error("policy.jobs_per_hour", f"must be above 0 (got {p.jobs_per_hour:g}); the jobs an "
                        "hour one GPU is assumed to deliver until the fleet has measured it, e.g. 8")
    if not p.jobs_per_hour_dlperf >= 0:
        raise loc.error("policy.jobs_per_hour_dlperf", f"must be 0 or above (got {p.jobs_per_hour_dlperf:g}); "
                        "vast.ai's dlperf per GPU of the GPU policy.jobs_per_hour is for, e.g. 60 (about an "
                        "RTX 4090), or 0 to assume policy.jobs_per_hour of every GPU model")
    for gpu, x in p.jobs_per_hour_by_gpu.items():
        if not x > 0:
            raise loc.error("policy.jobs_per_hour_by_gpu", f"{gpu!r}: must be above 0 (got {x:g}); jobs an hour "
                            "one GPU of that model delivers, e.g. {RTX 4090: 8}")
    if float(p.drain_within) < 60:
        raise loc.error("policy.drain_within", f"must be at least 1m (got {float(p.drain_within):g}s); the "
                        "backlog is planned to be cleared within this long, e.g. 1h")
    if not p.retire_ahead_hours > 0:
        raise loc.error("policy.retire_ahead_hours", f"must be above 0 (got {p.retire_ahead_hours:g}); the hours "
                        "before an instance's end that its replacement is rented and it is drained, e.g. 1")


def _check_limits(s: Settings, loc: _Lines) -> None:
    for key, v in (("policy.max_instances", s.policy.max_instances),
                   ("policy.max_rents_per_hour", s.policy.max_rents_per_hour),
                   ("policy.max_destroys_per_hour", s.policy.max_destroys_per_hour),
                   ("vast.max_attempts", s.vast.max_attempts),
                   ("alerts.max_new_per_tick", s.alerts.max_new_per_tick),
                   ("model.max_retries", s.model.max_retries)):
        if v < 0:
            raise loc.error(key, "must not be negative")
    for key, x in (("policy.max_total_dph", s.policy.max_total_dph),
                   ("policy.max_dph_per_instance", s.policy.max_dph_per_instance),
                   ("alerts.low_balance", s.alerts.low_balance), ("fleet.disk_gb", s.fleet.disk_gb),
                   ("policy.credit_reserve", s.policy.credit_reserve),
                   ("policy.contract_min_hours", s.policy.contract_min_hours),
                   ("model.temperature", s.model.temperature)):
        if x < 0:
            raise loc.error(key, f"must not be negative (got {x:g}); write 0 or more")
    if float(s.alerts.repeat_after) < 60:
        raise loc.error("alerts.repeat_after", f"must be at least 1m (got {float(s.alerts.repeat_after):g}s); an "
                        "unacked alert is notified again this long after its last notification, e.g. 4h")
    for key, b in (("policy.max_daily_spend", s.policy.max_daily_spend),
                   ("policy.max_monthly_spend", s.policy.max_monthly_spend)):
        if b is not None and b < 0:
            raise loc.error(key, f"must not be negative (got {b:g}); write dollars, or null for no budget")
    if s.alerts.idle_ticks < 1:
        raise loc.error("alerts.idle_ticks", f"must be at least 1 (got {s.alerts.idle_ticks})")
    if s.alerts.unmet_after < 0:
        raise loc.error("alerts.unmet_after", f"must not be negative (got {s.alerts.unmet_after}); write a number "
                        "of ticks, or 0 to turn the unmet-demand alert off")
    if not 0 <= s.policy.min_reliability <= 1:
        raise loc.error("policy.min_reliability", "a share between 0 and 1")
    if not 0 < s.policy.max_bid_share <= 1:
        raise loc.error("policy.max_bid_share", f"a share of the on-demand price above 0 and at most 1 (got "
                        f"{s.policy.max_bid_share:g}), e.g. 0.7")
    if s.policy.max_price_increase < 0:
        raise loc.error("policy.max_price_increase", f"must not be negative (got {s.policy.max_price_increase:g}); "
                        "a share, e.g. 0.15 accepts increases up to +15 %")
    for u, key in ((s.vast.url, "vast.url"), (s.model.base_url, "model.base_url"), (s.demand.url, "demand.url")):
        if u is not None and not _is_http_url(u):
            raise loc.error(key, "must start with http:// or https://")


_HOST_NAME = re.compile(r"\.?[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*")


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6; port 0 = any free port, logged at start) -> (host, port);
    ValueError saying what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"{listen!r} is not HOST:PORT with a port from 0 (any free port) to 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_http(h: HttpSettings, loc: _Lines) -> None:
    if h.listen is not None:
        try:
            host, _port = split_listen(h.listen)
        except ValueError as e:
            raise loc.error("http.listen", f"{e}; write e.g. 127.0.0.1:9464, or null for no endpoint") from None
        if not is_loopback(host) and h.token_file is None and h.token_credential is None:
            raise loc.error("http.listen", f"{host} is reachable beyond this machine and no token is set; set "
                            "http.token_file or http.token_credential, or listen on 127.0.0.1")
    for name in h.allowed_hosts:
        if not _HOST_NAME.fullmatch(name):
            raise loc.error("http.allowed_hosts", f"{name[:80]!r} is not a host name; write names like "
                            "fleet.example.com, or .example.com for every name under example.com")
    if not h.token_name.strip() or len(h.token_name) > 64 or any(
            c in "[]" or not c.isprintable() for c in h.token_name):
        raise loc.error("http.token_name", "a name of 1-64 printable characters without brackets "
                        "(it is recorded as the operator on every action)")


def _check_storage(st: StorageSettings, loc: _Lines) -> None:
    if st.url is None:
        return
    if not st.url.strip():
        raise loc.error("storage.url", "is empty; write null (fleet-agent.db in data_dir), a SQLite file path, "
                        "or postgresql://USER@HOST:PORT/DATABASE")
    if "://" in st.url and not is_pg_url(st.url):
        raise loc.error("storage.url", f"{st.url.split('://', 1)[0]}:// is not a database fleet-agent can use; "
                        "write a SQLite file path or postgresql://USER@HOST:PORT/DATABASE")
    problem = url_problem(st.url) if is_pg_url(st.url) else None
    if problem is not None:
        raise loc.error("storage.url", problem)


def _check(s: Settings, loc: _Lines) -> None:
    """Rules across values that types alone cannot state; the first broken one is raised."""
    _check_names(s, loc)
    _check_context(s.context, loc)
    _check_schedule(s.schedule, loc)
    _check_limits(s, loc)
    _check_price(s.model, loc)
    _check_throughput(s.policy, loc)
    _check_http(s.http, loc)
    _check_storage(s.storage, loc)
    _check_archive(s.storage, loc)
    _check_failover(s.storage, loc)


def _archive_url_ok(u: str) -> bool:
    """s3://bucket/prefix with a valid bucket name, or file:///directory."""
    return re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S*)?|file:///\S+", u) is not None


def _check_archive(st: StorageSettings, loc: _Lines) -> None:
    if st.archive_after is not None and st.is_pg:
        raise loc.error("storage.archive_after", "the storage tiers are for a log in SQLite; with a PostgreSQL "
                        "storage.url write null (the server keeps every event in its table)")
    if st.archive_after is not None and float(st.archive_after) < 32 * 86400:
        raise loc.error("storage.archive_after", f"must be at least 32d (got {float(st.archive_after):g}s): the "
                        "month's spend budget reads this month's events from the database; write e.g. 90d, or "
                        "null to keep every event in the database")
    u = st.archive_url
    if u is not None and not _archive_url_ok(u):
        raise loc.error("storage.archive_url", f"{u!r} is not s3://bucket/prefix (a valid bucket name) or "
                        "file:///directory")
    if st.s3_endpoint_url is not None and not _is_http_url(st.s3_endpoint_url):
        raise loc.error("storage.s3_endpoint_url", "must start with http:// or https://")


def parse(text: str, file: str = "<config>") -> Settings:
    """``text`` (the config file ``file``) as validated Settings; a ConfigError naming the file, the line
    and the key, with how to fix it, when it is not."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{file}: {len(text)} characters is too large for a config file (at most {MAX_BYTES}); "
                          "check that it is the config, see config.example.yaml")
    where = _Lines(file)
    s = _validated(_read(text, where), where)
    _check(s, where)
    return dataclasses.replace(s, source_path=None if file.startswith("<") else file)


# ------------------------------------------------------------------ a config broken in places
# The daemon keeps the configuration it last loaded when the file on disk breaks; an operator must still be
# able to read the log and answer alerts then. ``load_partial`` sets each broken part of the file aside (its
# defaults stand in; a section is replaced by a ``BrokenSection`` that raises its error on any use), and a
# command refuses only when it reads a broken part (the table in docs/configuration.md, ``reads=`` in
# agent/cli/parser.py).

# The parts every command with a config reads: where the log is and whose it is.
CORE_PARTS = ("agent_id", "data_dir", "storage")


class BrokenSection:
    """A section the file gets wrong, in place of its settings: any use raises its ConfigError."""

    def __init__(self, name: str, error: ConfigError) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_error", error)

    def __getattr__(self, key: str) -> NoReturn:
        raise object.__getattribute__(self, "_error")

    def __repr__(self) -> str:
        return f"BrokenSection({object.__getattribute__(self, '_name')!r})"

    @property
    def __dataclass_fields__(self) -> NoReturn:  # dataclasses.asdict() and fields() of it: the error, too
        raise object.__getattribute__(self, "_error")


def broken_error(section: object) -> ConfigError | None:
    """The error of a section set aside by ``load_partial``, or None for a sound one."""
    return object.__getattribute__(section, "_error") if isinstance(section, BrokenSection) else None


def parse_partial(text: str, file: str = "<config>") -> tuple[Settings, dict[str, ConfigError]]:
    """``text`` as Settings with each broken part set aside, and the first error of each broken part (by its
    top-level key, in file order). A file that cannot be read as YAML at all, or is too large, raises."""
    if len(text) > MAX_BYTES:
        raise ConfigError(f"{file}: {len(text)} characters is too large for a config file (at most {MAX_BYTES}); "
                          "check that it is the config, see config.example.yaml")
    where = _Lines(file)
    data = _read(text, where)
    found: list[tuple[int, str, ConfigError]] = []
    if "source_path" in data:
        found.append((where.line(("source_path",)), "source_path", _unknown_key("source_path", (), _keys(Settings),
                                                                                where)))
    while True:
        for _line, part, _e in found:
            data.pop(part, None)
        try:
            s = _adapter(Settings).validate_python(_fill_sections(Settings, data))
        except ValidationError as e:
            problems = [_problem_at(err, data, where) for err in e.errors()]
            if not any(part in data for _line, part, _e in problems):
                raise min(problems, key=lambda p: p[0])[2] from None
            found.extend(problems)
            continue
        where.failed = None
        try:
            _check(s, where)
        except ConfigError as e:
            part = (where.failed or "").partition(".")[0]
            if part not in data:  # (nothing to set aside: the file is broken as a whole)
                raise
            found.append((where.line((part,)), part, e))
            continue
        break
    broken: dict[str, ConfigError] = {}
    for _line, part, error in sorted(found, key=lambda f: f[0]):
        broken.setdefault(part, error)
    sections = _sections(Settings)
    s = dataclasses.replace(s, source_path=None if file.startswith("<") else file,
                            **{k: typing.cast(Any, BrokenSection(k, v)) for k, v in broken.items() if k in sections})
    return s, broken


def section_from(flat: Mapping[str, Any], name: str) -> Any:
    """Section ``name`` rebuilt from settings as the log records them (dotted key -> value, as ``config.applied``
    holds them), or None when they do not make a valid one."""
    cls = _sections(Settings)[name]
    hints = typing.get_type_hints(cls)
    d: dict[str, Any] = {}
    for key in _keys(cls):
        dotted = f"{name}.{key}"
        if typing.get_origin(_unwrap(hints[key])) is dict:
            d[key] = {k[len(dotted) + 1:]: v for k, v in flat.items() if k.startswith(dotted + ".")}
        elif dotted in flat:
            d[key] = flat[dotted]
    try:
        return _adapter(cls).validate_python(d)
    except ValidationError:
        return None


def needed(broken: Mapping[str, ConfigError], reads: tuple[str, ...] | None) -> ConfigError | None:
    """The first error (by line) of the broken parts a command reads: ``CORE_PARTS`` and ``reads``, or
    every part (unknown keys too) when ``reads`` is None."""
    hit = [e for part, e in broken.items() if reads is None or part in CORE_PARTS or part in reads]
    return hit[0] if hit else None


def path_text(p: str) -> str:
    """``p`` as a path prints (empty and ``.`` parts dropped, slashes collapsed)."""
    return str(Path(p))


def find_config(explicit: str | None, env: Mapping[str, str] | None = None) -> Path:
    """The config file: ``explicit`` (``--config``), else ``$FLEET_AGENT_CONFIG``, else the first of
    ``SEARCH_PATHS`` that is a file; a ConfigError saying where it looked when there is none."""
    env = os.environ if env is None else env
    if explicit:
        if not Path(explicit).is_file():
            raise ConfigError(f"{explicit}: no such config file; create one with 'fleet-agent init' "
                              "or copy config.example.yaml")
        return Path(explicit)
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


def load(explicit: str | None = None, env: Mapping[str, str] | None = None) -> Settings:
    p = find_config(explicit, env)
    return parse(_file_text(p), str(p))


def load_partial(explicit: str | None = None, env: Mapping[str, str] | None = None,
                 from_cache: bool = False) -> tuple[Settings, dict[str, ConfigError]]:
    """``load``, with each broken part set aside (``parse_partial``). With ``from_cache`` (read commands only), a file
    that validated before, unchanged, under the same code, comes from the validated-config cache
    (``ConfigCache``) without being parsed again. What acts on the fleet parses the file itself: the cache
    lives in a directory the config file's owner may not control, so policy is never taken from it."""
    p = find_config(explicit, env)
    raw, st = _file_bytes(p)
    cache = ConfigCache.of(p, raw, st, os.environ if env is None else env) if from_cache else None
    cached = cache.get() if cache is not None else None
    if cached is not None:
        return dataclasses.replace(cached, source_path=str(p)), {}
    s, broken = parse_partial(_decode(raw, p), str(p))
    if cache is not None and not broken:
        cache.put(s)
    return s, broken


def _file_bytes(p: Path) -> tuple[bytes, os.stat_result]:
    try:
        st = p.stat()
        if st.st_size > MAX_BYTES:
            raise ConfigError(f"{p}: {st.st_size} bytes is too large for a config file (at most {MAX_BYTES}); "
                              "check that it is the config, see config.example.yaml")
        return p.read_bytes(), st
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror}") from None


def _decode(raw: bytes, p: Path) -> str:
    """``raw`` as text, lines ending in ``\\n`` (as a file opened as text reads them)."""
    try:
        return raw.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text; save the config as UTF-8") from None


def _file_text(p: Path) -> str:
    return _decode(_file_bytes(p)[0], p)


# ------------------------------------------------------------------ the validated-config cache
# A read command should not pay for PyYAML, pydantic and validation to read a config that has not changed. The
# cache keeps, per config file, the settings it validated to, keyed by the file's path, mtime, size and the
# sha256 of its bytes, and by a hash of the code that validates (this module and what it reads, the libraries'
# files, the Python version): any difference, a damaged entry, or one whose settings do not match its own
# checksum is a miss and the file is parsed. Only a file that validated whole is kept (a broken part is always
# reported from the file). The settings hold where secrets come from, never a secret (``SecretRef``).

CACHE_FORMAT = 1
# This package's modules whose code decides what a config file validates to.
_CODE_FILES = ("config.py", "price.py", "times.py", "secrets.py", "errors.py")
_CODE_LIBS = ("pydantic", "pydantic_core", "yaml", "apscheduler")


def code_hash(root: Path | None = None) -> str:
    """A hash of the code that turns a config file into settings: this package's modules that do (in ``root``,
    default this package), the files of the libraries they use (path, mtime, size), and the Python version."""
    import importlib.util
    import sys

    h = hashlib.sha256(f"format {CACHE_FORMAT}; python {sys.version}".encode())
    here = root or Path(__file__).resolve().parent
    for name in _CODE_FILES:
        h.update(name.encode() + b"\0" + (here / name).read_bytes() + b"\0")
    for lib in _CODE_LIBS:
        spec = importlib.util.find_spec(lib)
        origin = spec.origin if spec is not None else None
        if origin and os.path.exists(origin):
            st = os.stat(origin)
            h.update(f"{lib} {origin} {st.st_mtime_ns} {st.st_size}\0".encode())
        else:
            h.update(f"{lib} absent\0".encode())
    return h.hexdigest()


def cache_dir(env: Mapping[str, str]) -> Path | None:
    """Where validated configs are kept: ``$FLEET_AGENT_CONFIG_CACHE`` (``off``: nowhere), else
    ``$XDG_CACHE_HOME/fleet-agent``, else ``~/.cache/fleet-agent`` (the data directory cannot hold it: the
    config names it)."""
    chosen = env.get("FLEET_AGENT_CONFIG_CACHE")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen)
    base = env.get("XDG_CACHE_HOME") or (os.path.join(env["HOME"], ".cache") if env.get("HOME") else None)
    return Path(base) / "fleet-agent" if base else None


def _checksum(settings: object) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, allow_nan=False).encode()).hexdigest()


def _rebuilt(cls: type, d: object) -> Any:
    """Section ``cls`` (or ``Settings``) from what ``_plain`` wrote; ValueError, KeyError or TypeError when
    ``d`` is not its exact shape."""
    if not isinstance(d, dict):
        raise ValueError("not a mapping")
    fields = [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]
    if set(d) != {f.name for f in fields}:
        raise ValueError("keys differ")
    kw: dict[str, Any] = {}
    for f in fields:
        v = d[f.name]
        section: Any = f.default_factory
        if isinstance(section, type) and dataclasses.is_dataclass(section):
            v = _rebuilt(section, v)
        elif str(f.type).startswith("Duration") and v is not None:
            v = Duration(v)
        kw[f.name] = v
    return cls(**kw)


@dataclass(frozen=True)
class ConfigCache:
    """The cache entry of one config file as read now: ``get`` the settings it validated to, ``put`` them."""

    file: Path
    key: dict[str, Any]

    @classmethod
    def of(cls, p: Path, raw: bytes, st: os.stat_result, env: Mapping[str, str]) -> ConfigCache | None:
        where = cache_dir(env)
        if where is None:
            return None
        path = str(p.resolve())
        try:
            code = code_hash()
        except OSError:
            return None
        key = {"path": path, "mtime_ns": st.st_mtime_ns, "size": st.st_size,
               "sha256": hashlib.sha256(raw).hexdigest(), "code": code}
        return cls(where / f"config-{hashlib.sha256(path.encode()).hexdigest()[:32]}.json", key)

    def get(self) -> Settings | None:
        """The cached settings when the entry is this file's, under this code, and sound; else None."""
        try:
            entry = json.loads(self.file.read_text(encoding="utf-8"))
            if entry.get("key") != self.key or entry.get("checksum") != _checksum(entry["settings"]):
                return None
            return typing.cast(Settings, _rebuilt(Settings, entry["settings"]))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put(self, s: Settings) -> None:
        """Keep ``s`` (validated from this file) for the next read; a cache that cannot be written is skipped."""
        plain = s.to_dict()
        body = json.dumps({"key": self.key, "checksum": _checksum(plain), "settings": plain}, sort_keys=True,
                          allow_nan=False)
        tmp = self.file.with_name(f".{self.file.name}.{os.getpid()}.tmp")
        try:
            self.file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(tmp, self.file)
        except OSError:
            tmp.unlink(missing_ok=True)


def example_text() -> str:
    # Imported here: importlib.resources loads tempfile, random and zipfile's readers, ~5 ms that every command
    # reading the config paid for this one use.
    from importlib import resources

    return resources.files("agent").joinpath("config.example.yaml").read_text(encoding="utf-8")
