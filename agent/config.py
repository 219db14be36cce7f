"""Configuration: YAML (+ environment, files, systemd credentials) -> typed, validated settings.

Errors name the file, the line and the key, and say how to fix it. Secrets
(the vast.ai key, the model key) never live in the YAML: it names where they
come from (an environment variable, a file, a systemd credential), and they
are resolved into ``Secret`` objects that never print.

Search order: ``--config PATH``, ``$FLEET_AGENT_CONFIG``, ``./config.yaml``,
``/etc/fleet-agent/config.yaml``.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from datetime import UTC

from agent.errors import ConfigError
from agent.record import asdict, field, fields_of, is_record, record, replace
from agent.secrets import Secret

# Nothing here imports typing, pathlib, re or structlog when the module loads or a plain config is read: every
# command loads the config (a field's type is read from its annotation's text, see _kind; Path is imported
# where a method returns one; the logger where a key file is warned about).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path
    from typing import Any, Literal, NoReturn, TypeAlias, TypeGuard, TypeVar

    # the scheduler loads when a cron expression is read, not with every command
    from apscheduler.triggers.cron import CronTrigger

    from agent.store.target import LogLocation

    _D = TypeVar("_D")

SEARCH_PATHS = ("./config.yaml", "/etc/fleet-agent/config.yaml")

# The daemon schedules in UTC; a cron expression is read in it.
SCHEDULE_TIMEZONE = UTC

# Settings with a fixed set of values: checked when the config loads. Each is written once, as text that
# type checkers read as the Literal and the config reads as the list of choices (_kind).
LogLevel: TypeAlias = 'Literal["debug", "info", "warning", "error"]'
# auto: console on a TTY, JSON lines otherwise
LogFormat: TypeAlias = 'Literal["auto", "json", "console"]'
# what a tool call written as text gets besides a correction
TextToolCalls: TypeAlias = 'Literal["reject", "accept"]'
# any OpenAI-compatible server, or the built-in rules provider
ProviderName: TypeAlias = 'Literal["openai", "rules"]'


class Duration(float):
    """Seconds; written in YAML as a number or as '30s', '5m', '2h', '1d'."""


# Its units; "ms" is tried before "s".
_UNITS: dict[str | None, float] = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


@record(frozen=True)
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


@record(frozen=True)
class LoggingSettings:
    """``logging:`` how much the daemon says, and in which form."""

    level: LogLevel = "info"
    format: LogFormat = "auto"


@record(frozen=True)
class ScheduleSettings:
    """``schedule:`` when ticks run and how long they may take."""

    # Either every `interval`, or at the times of a 5-field `cron` expression (UTC) when set.
    interval: Duration = Duration(300)
    cron: str | None = None
    jitter: Duration = Duration(0)
    misfire_grace: Duration = Duration(120)
    # Each tick: at most this many model calls, within this wall-clock budget.
    max_steps: int = 8
    tick_timeout: Duration = Duration(600)
    # On SIGTERM, how long the running step may take to finish.
    stop_deadline: Duration = Duration(60)


@record(frozen=True)
class VastSettings(_KeyFrom):
    """``vast:`` the vast.ai API and where its key comes from."""

    url: str = "https://console.vast.ai"
    # The key: from this environment variable, else this file, else this systemd credential.
    api_key_env: str | None = "VAST_API_KEY"
    api_key_file: str | None = None
    api_key_credential: str | None = "vast_api_key"
    # Per request; reads are retried on 429, 5xx and timeouts. A call that changes the fleet is
    # sent once (again only when the connection was refused before sending); an unknown outcome
    # is settled by looking.
    timeout: Duration = Duration(30)
    max_attempts: int = 3
    # vast.ai limits each endpoint per key as a minimum interval between requests and sends no
    # Retry-After: two requests to one endpoint start at least this far apart (0 = no pacing).
    min_interval: Duration = Duration(0.6)
    # A rent whose outcome is unknown counts as live until its label is listed, or until this
    # long has passed and at least two listings lacked it ("not created").
    settle_after: Duration = Duration(300)


@record(frozen=True)
class DemandSettings:
    """``demand:`` the job queue whose pending count says how much capacity is wanted."""

    url: str | None = None


@record(frozen=True)
class ModelSettings(_KeyFrom):
    """``model:`` the model that decides, its server, its key and its sampling settings."""

    provider: ProviderName = "openai"
    base_url: str = "http://127.0.0.1:8000/v1"
    name: str = "qwen2.5-32b-instruct"
    # An optional key, looked for in the same order as vast's.
    api_key_env: str | None = "OPENAI_API_KEY"
    api_key_file: str | None = None
    api_key_credential: str | None = "model_api_key"
    timeout: Duration = Duration(60)
    temperature: float = 0.2
    max_output_tokens: int = 2048
    max_retries: int = 1
    retry_timeouts: bool = False
    text_tool_calls: TextToolCalls = "reject"


@record(frozen=True)
class ContextSettings:
    """``context:`` the token budget of each request and when the conversation is compacted."""

    budget_tokens: int = 30000
    output_reserve: int = 2048
    # Compact above high_water x budget, down to low_water x budget.
    high_water: float = 0.8
    low_water: float = 0.3
    # Token counting: a tiktoken encoding by name, or a local file checked against its sha256.
    encoding: str = "cl100k_base"
    encoding_file: str | None = None
    encoding_sha256: str | None = None
    # Caps: the rolling summary, each knowledge file, the pinned block, one tool output.
    summary_max_tokens: int = 2000
    knowledge_max_tokens: int = 3000
    pinned_max_tokens: int = 8000
    tool_output_max_tokens: int = 1500
    calibration_margin: float = 0.05
    # At a compaction, tool outputs older than the newest this many ticks become one-line stubs (0 = never).
    mask_after_ticks: int = 3
    # The facts block (hosts' failures and refusals, GPU prices seen) after the summary.
    facts_max_tokens: int = 400
    # Caps of the pinned block's own blocks (knowledge files share what is left of pinned_max_tokens).
    directives_max_tokens: int = 2000
    memory_max_tokens: int = 2000
    # A request over the budget first folds the newest tick's floods: past this many system messages of one
    # kind (an alert, a destroy, a late result, ...), the rest become one digest naming them (0 = never fold).
    flood_keep: int = 3


@record(frozen=True)
class FleetSettings:
    """``fleet:`` what runs on every rented machine (the model cannot change it)."""

    label_prefix: str = "fa-"
    image: str = "ghcr.io/example/prover:1.4.2"
    onstart: str = "/opt/prover/start.sh"
    env: dict[str, str] = field(default_factory=dict)
    disk_gb: float = 40.0
    runtype: str = "ssh"
    search_limit: int = 10  # offers search_offers shows the model


@record(frozen=True)
class PolicySettings:
    """``policy:`` the limits code enforces on every call that changes the fleet."""

    max_instances: int = 8
    max_total_dph: float = 12.0
    max_dph_per_instance: float = 2.5
    allowed_gpus: list[str] = field(default_factory=lambda: ["RTX 4090", "RTX 3090", "L40S", "A100 SXM4"])
    min_reliability: float = 0.95
    max_rents_per_hour: int = 6
    max_destroys_per_hour: int = 12
    # Instances with our label that no event knows about: destroyed, or (false) only alerted on.
    destroy_orphans: bool = False
    dry_run: bool = False
    # Spend budgets in dollars per UTC day / calendar month, from the log's rental history (None: off).
    max_daily_spend: float | None = None
    max_monthly_spend: float | None = None
    # vast.ai host ids never rented on; operators and the model add more through the log.
    excluded_hosts: list[int] = field(default_factory=list)
    # A host whose instances of ours failed twice within a day is excluded for this long (0: never).
    host_failure_exclusion: Duration = Duration(86400)


@record(frozen=True)
class AlertSettings:
    """``alerts:`` when an alert opens, and the command told about it."""

    stuck_after: Duration = Duration(1200)
    low_balance: float = 25.0
    failed_ticks: int = 3
    policy_blocks: int = 5
    # New alerts the model may open in one tick; repeats of live alerts are not counted.
    max_new_per_tick: int = 3
    # Ticks in a row without a tool call (while there is work) before "the model has not acted" opens.
    idle_ticks: int = 6
    # Runs off the tick's path with a minimal environment (agent/feedback/alert_hook.py).
    notify_command: str | None = None
    notify_timeout: Duration = Duration(10)
    # An open alert nobody acked is notified again this long after its last notification.
    repeat_after: Duration = Duration(4 * 3600)


@record(frozen=True)
class HttpSettings:
    """``http:`` the metrics, health and console endpoint the daemon (and ``fleet-agent web``) serves."""

    # HOST:PORT to listen on; null = no HTTP endpoint.
    listen: str | None = "127.0.0.1:9464"
    # Writes (ack, note) need this token, as a bearer header or through the login form. Without one the
    # console is read-only; listening beyond loopback without one is refused.
    token_file: str | None = None
    token_credential: str | None = None
    # The operator name recorded on every action taken with the token.
    token_name: str = "web"

    @property
    def token_ref(self) -> SecretRef:
        """Where the token comes from: the file, else the systemd credential (never the environment)."""
        return SecretRef(None, self.token_file, self.token_credential)


@record(frozen=True)
class StorageSettings:
    """``storage:`` where the event log lives (a SQLite file, the default, or a PostgreSQL database), and
    its tiers: old months move into sealed segment files (agent/store/archive.py)."""

    # null: fleet-agent.db in data_dir. A path: that SQLite file. postgresql://USER@HOST:PORT/DATABASE:
    # this fleet's log in that database (several fleets may share it); never a password in the URL.
    url: str | None = None
    # The PostgreSQL role's password: from this environment variable, else this file, else this systemd
    # credential (none found: the server must not ask for one, e.g. a Unix socket with peer auth).
    password_env: str | None = "FLEET_AGENT_PG_PASSWORD"
    password_file: str | None = None
    password_credential: str | None = "pg_password"
    # A standby daemon (``fleet-agent run --standby``) takes over within this long of the active one
    # dying or hanging (its heartbeat ages past it; on PostgreSQL its lock session ends at half of it).
    failover_seconds: Duration = Duration(30)
    # The log's tiers (agent/store/archive.py): old months move into sealed segment files.
    # Events older than this and covered by a summary move into one segment per month; null = never.
    archive_after: Duration | None = None
    # A copy of every segment on object storage (s3://bucket/prefix) or in a directory (file:///path).
    archive_url: str | None = None
    # For S3-compatible stores other than AWS (MinIO, ...): the endpoint; and the region.
    s3_endpoint_url: str | None = None
    s3_region: str | None = None
    # The access key pair: from these environment variables, else files, else systemd credentials.
    # Both unset: boto3's own chain (instance role, ~/.aws).
    s3_access_key_id_env: str | None = "AWS_ACCESS_KEY_ID"
    s3_access_key_id_file: str | None = None
    s3_access_key_id_credential: str | None = None
    s3_secret_access_key_env: str | None = "AWS_SECRET_ACCESS_KEY"
    s3_secret_access_key_file: str | None = None
    s3_secret_access_key_credential: str | None = None

    @property
    def is_pg(self) -> bool:
        if self.url is None:  # a SQLite log (the default): the URL checks need not load
            return False
        from agent.store.target import is_pg_url

        return is_pg_url(self.url)

    @property
    def password_ref(self) -> SecretRef:
        return SecretRef(self.password_env, self.password_file, self.password_credential)


@record(frozen=True)
class Settings:
    """The whole configuration file, validated; paths resolve against the file's directory."""

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
    http: HttpSettings = field(default_factory=HttpSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    # Where this came from (not a YAML key).
    source_path: str | None = field(default=None, compare=False, metadata={"internal": True})

    # -------------------------------------------------------------- derived

    @property
    def base_dir(self) -> Path:
        from pathlib import Path

        return Path(self.source_path).resolve().parent if self.source_path else Path.cwd()

    def path(self, p: str) -> Path:
        """``p`` resolved against the config file's directory. Kept per settings object (it does not
        change once loaded): a ``p`` without ``$VAR`` or ``~`` gives the Path found the first time while
        the working directory stays, without resolving the file's symlinks again (a tick asks 3 times)."""
        key = None
        if "$" not in p and not p.startswith("~"):
            key = (p, "" if self.source_path and os.path.isabs(self.source_path) else os.getcwd())
            kept = self._kept_paths().get(key)
            if kept is not None:
                return kept
        from pathlib import Path

        q = Path(os.path.expandvars(os.path.expanduser(p)))
        q = q if q.is_absolute() else (self.base_dir / q)
        if key is not None:
            self._kept_paths()[key] = q
        return q

    def _kept_paths(self) -> dict[tuple[str, str], Path]:
        kept: dict[tuple[str, str], Path] | None = self.__dict__.get("_paths")
        if kept is None:
            kept = {}
            object.__setattr__(self, "_paths", kept)  # not a field: equality, repr and replace ignore it
        return kept

    @property
    def data_path(self) -> Path:
        return self.path(self.data_dir)

    def path_text(self, p: str) -> str:
        """``str(self.path(p))``, without importing pathlib."""
        q = path_text(os.path.expandvars(os.path.expanduser(p)))
        if q.startswith("/"):
            return q
        base = os.path.dirname(os.path.realpath(self.source_path)) if self.source_path else os.getcwd()
        return path_text(base + "/" + q)

    @property
    def db_file(self) -> str:
        """``str(self.db_path)``, without importing pathlib (what a command opens the log with)."""
        if self.storage.url is not None and not self.storage.is_pg:
            return self.path_text(self.storage.url)
        return os.path.join(self.path_text(self.data_dir), "fleet-agent.db")

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
        from agent.store.target import PgTarget

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
        d = asdict(self)
        d.pop("source_path", None)
        return d

    def config_hash(self) -> str:
        import hashlib  # OpenSSL loads for the hash, not with every command
        import json

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
        from pathlib import Path

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
    from agent import logsetup  # structlog loads when there is something to say, not with every command

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

    def error(self, dotted: str, msg: str) -> ConfigError:
        """A ConfigError for the setting ``dotted`` (like ``schedule.cron``), at its line."""
        return ConfigError(f"{self.at(tuple(dotted.split('.')))}: {dotted}: {msg}")


# ------------------------------------------------------------------ the plain subset, read without PyYAML

# PyYAML's implicit resolvers (YAML 1.1, yaml/resolver.py), pattern for pattern: a plain scalar that one of
# them matches is not text. The plain reader converts the simplest of those itself (decimal integers,
# decimals, true/false/yes/no/on/off, null and ~) and leaves every other match to PyYAML.
# tests/test_config_plain.py checks them against PyYAML's own table.
_YAML_RESOLVER_PATTERNS = (
    r"""^(?:yes|Yes|YES|no|No|NO
                    |true|True|TRUE|false|False|FALSE
                    |on|On|ON|off|Off|OFF)$""",
    r"""^(?: ~
                    |null|Null|NULL
                    | )$""",
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                    |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                    |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                    |[-+]?\.(?:inf|Inf|INF)
                    |\.(?:nan|NaN|NAN))$""",
    r"""^(?:[-+]?0b[0-1_]+
                    |[-+]?0[0-7_]+
                    |[-+]?(?:0|[1-9][0-9_]*)
                    |[-+]?0x[0-9a-fA-F_]+
                    |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""",
    r"""^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]
                    |[0-9][0-9][0-9][0-9] -[0-9][0-9]? -[0-9][0-9]?
                     (?:[Tt]|[ \t]+)[0-9][0-9]?
                     :[0-9][0-9] :[0-9][0-9] (?:\.[0-9]*)?
                     (?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$""",
    r"^(?:<<)$",
    r"^(?:=)$",
)
# What those patterns can match at all: a scalar with any other character is text, no pattern needed.
_YAML_NUMBER_CHARS = frozenset("0123456789_+-.:xabcdefABCDEFtTZ inINF<=")
_YAML_NUMBER_FIRST = frozenset("0123456789+-.<=")
_yaml_resolvers: list[Callable[[str], object]] = []


def _yaml_resolved(s: str) -> bool:
    """Whether one of PyYAML's implicit resolvers would read ``s`` as other than text (compiled on first use)."""
    if s[:1] not in _YAML_NUMBER_FIRST or s.count(".") > 1 or not set(s) <= _YAML_NUMBER_CHARS:
        return False  # (each pattern starts so, and has at most one dot)
    if not _yaml_resolvers:
        import re

        _yaml_resolvers.extend(re.compile(p, re.X).match for p in _YAML_RESOLVER_PATTERNS)
    return any(match(s) for match in _yaml_resolvers)

_YAML_BOOLS = {**dict.fromkeys(("yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON"), True),
               **dict.fromkeys(("no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF"), False)}
_YAML_NULLS = ("null", "Null", "NULL", "~")
# The plain subset is read with string methods, not regular expressions (compiling those cost more than
# reading the file); tests/test_config_lean.py checks each function against the pattern it stands for.
_DIGITS = frozenset("0123456789")
_KEY_FIRST = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_")
_KEY_CHARS = _KEY_FIRST | _DIGITS


def _signless(s: str) -> str:
    return s[1:] if s[:1] in ("-", "+") else s


def _plain_int(s: str) -> bool:
    """``[-+]?(?:0|[1-9][0-9]*)``, the whole of ``s``: a decimal integer."""
    d = _signless(s)
    return d == "0" or (d[:1] in _DIGITS and d[0] != "0" and set(d) <= _DIGITS)


def _plain_float(s: str) -> bool:
    """``[-+]?[0-9]+\\.[0-9]+``, the whole of ``s``: a decimal with digits on both sides of its point."""
    whole, dot, frac = _signless(s).partition(".")
    return bool(dot and whole and frac) and set(whole) <= _DIGITS and set(frac) <= _DIGITS


def _key_line(t: str) -> tuple[str, str] | None:
    """``( *)([A-Za-z_][A-Za-z0-9_]*):(?: +(.*))?``, the whole of ``t``: (key, value stripped), or None."""
    key, colon, rest = t.lstrip(" ").partition(":")
    if not colon or key[:1] not in _KEY_FIRST or not set(key) <= _KEY_CHARS or rest[:1] not in ("", " "):
        return None
    return key, rest.strip()


def _item_line(t: str) -> str | None:
    """``( *)- +(.*)``, the whole of ``t``: the item's text, or None."""
    body = t.lstrip(" ")
    return body[2:].lstrip(" ") if body[:2] == "- " else None


def _plain_chars(text: str) -> bool:
    """``[^\\n\\x20-\\x7e]`` found nowhere in ``text``: only printable ASCII and line feeds (tabs, CR and
    non-ASCII are left to PyYAML)."""
    return text.isascii() and text.replace("\n", "").isprintable()


class _NotPlain(Exception):
    """The text leaves the plain subset; PyYAML reads it (and words the error when it is not YAML)."""


def _plain_text(s: str) -> Any:
    """A scalar written plain (no quotes) as PyYAML's safe loader reads it."""
    if not s or s[0] in "?:,[]{}#&*!|>'\"%@`" or (s[0] == "-" and s[1:2] in ("", " ")):
        raise _NotPlain
    if ": " in s or s.endswith(":") or " #" in s:
        raise _NotPlain
    if s in _YAML_BOOLS:
        return _YAML_BOOLS[s]
    if s in _YAML_NULLS:
        return None
    if _plain_int(s):
        return int(s)
    if _plain_float(s):
        return float(s)
    if _yaml_resolved(s):  # octal, hex, 1_000, 1:30, .inf, a date, <<, =
        raise _NotPlain
    return s


def _quoted(s: str) -> str:
    """A one-line quoted scalar without escapes: what is between the quotes."""
    q = s[0]
    end = s.find(q, 1)
    if end < 0 or (q == '"' and "\\" in s[:end]) or s[end + 1:].strip():
        raise _NotPlain
    return s[1:end]


def _plain_value(v: str) -> Any:
    """The value after ``key: `` (its comment already cut off, unless it is quoted or a flow list)."""
    if v[0] in "\"'":
        end = v.find(v[0], 1) + 1
        return _quoted(v[:end] if end and _comment(v[end:]) else v)
    if v[0] == "[":
        end = v.find("]") + 1
        if not end or not (_comment(v[end:]) or not v[end:].strip()):
            raise _NotPlain
        inner = v[1:end - 1].strip()
        return [] if not inner else [_flow_item(x.strip()) for x in inner.split(",")]
    v = v.split(" #", 1)[0].rstrip()
    return {} if v == "{}" else _plain_text(v)


def _comment(tail: str) -> bool:
    """Whether ``tail`` (what follows a value on its line) is a comment after whitespace."""
    return tail[:1] == " " and tail.lstrip().startswith("#")


def _flow_item(s: str) -> Any:
    if not s or any(c in s for c in ":#[]{}"):
        raise _NotPlain
    return _quoted(s) if s[0] in "\"'" else _plain_text(s)


class _PlainReader:
    """Block mappings of ``key: value`` lines, block lists of scalars, ``[a, b]``, ``{}`` and comments."""

    def __init__(self, text: str, loc: _Loc) -> None:
        self.loc = loc
        self.lines = [(n, len(t) - len(body), t.rstrip()) for n, t in enumerate(text.split("\n"), 1)
                      if (body := t.lstrip(" ")) and body[0] != "#"]  # (no other whitespace: _plain_chars)
        self.i = 0

    def _next(self, indent: int) -> tuple[int, str] | None:
        """The next line's (indent, text) when it is at ``indent`` or deeper, else None."""
        if self.i >= len(self.lines):
            return None
        _, at, t = self.lines[self.i]
        return (at, t) if at >= indent else None

    def mapping(self, indent: int, path: tuple[str, ...]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while (nxt := self._next(indent)) is not None:
            at, t = nxt
            kv = _key_line(t)
            if at != indent or kv is None or kv[0] in out:
                raise _NotPlain  # a deeper line, a list item, or a repeated key (PyYAML says which)
            key, v = kv
            self.loc.lines[path + (key,)] = self.lines[self.i][0]
            self.i += 1
            out[key] = self._value(v, indent, path + (key,))
        return out

    def _value(self, v: str, indent: int, path: tuple[str, ...]) -> Any:
        if v and not v.startswith("#"):
            if (nxt := self._next(indent + 1)) is not None:
                raise _NotPlain  # a value continued on the next line
            return _plain_value(v)
        nxt = self._next(indent)
        if nxt is None:
            return None
        at, t = nxt
        if _item_line(t) is not None:
            return self.sequence(at)
        return self.mapping(at, path) if at > indent else None

    def sequence(self, indent: int) -> list[Any]:
        out: list[Any] = []
        while (nxt := self._next(indent)) is not None:
            at, t = nxt
            item = _item_line(t)
            if item is None:
                if at == indent and _key_line(t) is not None:
                    break  # the next key of the mapping this list (written at the key's indent) belongs to
                raise _NotPlain
            if at != indent or item[0] in "[{-":
                raise _NotPlain
            self.i += 1
            if self._next(indent + 1) is not None:
                raise _NotPlain
            out.append(_plain_value(item))
        return out


def _read_plain(text: str, file: str) -> tuple[dict[str, Any], _Loc] | None:
    """``text`` read without PyYAML when it keeps to the plain subset a config is written in: ASCII
    ``key: value`` lines, nested mappings, lists of scalars (``- x`` or ``[a, b]``), ``{}``, comments,
    quoted strings without escapes. Gives exactly what PyYAML's safe loader gives (values and the line of
    each key); None for anything else, which PyYAML then reads (and words any error of)."""
    if not _plain_chars(text):
        return None
    loc = _Loc(file)
    reader = _PlainReader(text, loc)
    try:
        if reader.lines and reader.lines[0][1] != 0:
            return None
        data = reader.mapping(0, ())
    except (_NotPlain, RecursionError):
        return None
    return (data, loc) if reader.i == len(reader.lines) else None


def _parse_yaml(text: str, file: str) -> tuple[dict[str, Any], _Loc]:
    """``text``'s mapping of settings and the line of each key: read here when it is plain (the common
    case, see ``_read_plain``), else by PyYAML (agent/configyaml.py), which also words every error."""
    plain = _read_plain(text, file)
    if plain is not None:
        return plain
    from agent import configyaml

    return configyaml.parse(text, file)



# ------------------------------------------------------------------ validation

_SECRET_KEYS = {"api_key", "key", "token", "password", "secret"}


class _Refused(Exception):
    """A value that does not fit its field's type (``_coerce`` names the key and what was expected)."""

    def __init__(self, why: str = "") -> None:
        super().__init__(why)
        self.why = why


_NOT_FINITE = "; .nan and .inf are not numbers a setting can hold, write a finite number"


def _is_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _finite(v: object) -> None:
    if isinstance(v, float) and not math.isfinite(v):
        raise _Refused(_NOT_FINITE)


def _duration_text(s: str) -> float | None:
    """``^\\s*(\\d+(?:\\.\\d+)?)\\s*(ms|s|m|h|d)?\\s*$``: seconds, or None when ``s`` is not written so."""
    s = s.strip()
    unit = next((u for u in ("ms", "s", "m", "h", "d") if s.endswith(u)), None)
    if unit is not None:
        s = s[:-len(unit)].rstrip()
    whole, dot, frac = s.partition(".")
    if not whole.isdecimal() or (dot and not frac.isdecimal()):
        return None
    return float(s) * _UNITS[unit]


def _to_duration(v: object) -> Duration:
    _finite(v)
    if _is_number(v) and v >= 0:
        return Duration(v)
    if isinstance(v, str) and (seconds := _duration_text(v)) is not None:
        return Duration(seconds)
    raise _Refused


def _to_bool(v: object) -> bool:
    if isinstance(v, bool):
        return v
    raise _Refused


def _to_int(v: object) -> int:
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise _Refused


def _to_float(v: object) -> float:
    _finite(v)
    if _is_number(v):
        return float(v)
    raise _Refused


def _to_str(v: object) -> str:
    if isinstance(v, str):
        return v
    raise _Refused


def _to_str_list(v: object) -> list[str]:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise _Refused


def _to_int_list(v: object) -> list[int]:
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v):
        return list(v)
    raise _Refused


def _to_str_map(v: object) -> dict[str, str]:
    if isinstance(v, dict) and all(_is_number(x) or isinstance(x, str) for x in v.values()):
        return {str(k): str(x) for k, x in v.items()}
    raise _Refused


# A field's annotation text -> the function that checks and converts a YAML value for it, and what it expects
# (in the error when a value does not fit). With ``X | None``, any X here, records (sections) and the Literal
# aliases above, these are every annotation a setting has: _kind refuses any other, and
# tests/test_config_lean.py checks what it reads against typing.get_type_hints for every field.
_SCALARS: dict[str, tuple[Callable[[object], object], str]] = {
    "Duration": (_to_duration, "a duration (seconds, or like 30s, 5m, 2h)"),
    "bool": (_to_bool, "true or false"), "int": (_to_int, "an integer"), "float": (_to_float, "a number"),
    "str": (_to_str, "a string"), "list[str]": (_to_str_list, "a list of strings"),
    "list[int]": (_to_int_list, "a list of host ids (whole numbers above 0)"),
    "dict[str, str]": (_to_str_map, "a mapping of string to string"),
}


class _Kind:
    """What one field holds: a section (a record, built from a mapping), or a value that ``convert`` checks
    and converts, described by ``expected``."""

    __slots__ = ("convert", "expected", "section")

    def __init__(self, convert: Callable[[object], object], expected: str, section: type | None = None) -> None:
        self.convert, self.expected, self.section = convert, expected, section


def _nullable(convert: Callable[[object], object]) -> Callable[[object], object]:
    return lambda v: None if v is None else convert(v)


def _one_of(choices: tuple[str, ...]) -> Callable[[object], object]:
    def convert(v: object) -> object:
        if isinstance(v, str) and v in choices:
            return v
        raise _Refused

    return convert


def _literal_choices(text: str) -> tuple[str, ...] | None:
    """The strings of ``Literal["a", "b"]`` written so (double quotes, ", " between), else None."""
    if not (text.startswith("Literal[") and text.endswith("]")):
        return None
    items = text[len("Literal["):-1].split(", ")
    if not all(len(x) >= 2 and x[0] == x[-1] == '"' and not set(x[1:-1]) & set('"\\,') for x in items):
        return None
    return tuple(x[1:-1] for x in items)


def _kind(text: str) -> _Kind:
    """The kind of a field annotated ``text`` (this module's names: ``from __future__ import annotations``
    keeps annotations as text, and the config reads them without typing); a TypeError for any other."""
    if text.endswith(" | None"):
        inner = _kind(text[:-len(" | None")])
        if inner.section is None:
            return _Kind(_nullable(inner.convert), f"{inner.expected} or null")
    elif text in _SCALARS:
        return _Kind(*_SCALARS[text])
    else:
        named = globals().get(text)
        if is_record(named):
            return _Kind(_to_str, "a mapping of settings", named)
        choices = _literal_choices(named) if isinstance(named, str) else None
        if choices is not None:
            return _Kind(_one_of(choices), "one of " + ", ".join(repr(c) for c in choices))
    raise TypeError(f"a setting annotated {text!r}: the config reads only {', '.join(_SCALARS)}, sections, "
                    "the Literal aliases of agent/config.py and any of them | None")


_KINDS: dict[type, dict[str, _Kind]] = {}
_KIND_OF: dict[str, _Kind] = {}  # (~100 fields have ~20 distinct annotations)


def _field_kinds(cls: type) -> dict[str, _Kind]:
    """Each YAML key of section ``cls`` (its fields but internal ones, in order) and what it holds; read from
    the annotations once per class."""
    kinds = _KINDS.get(cls)
    if kinds is None:
        kinds = _KINDS[cls] = {}
        for name, t, meta, _ in fields_of(cls):
            text = t if isinstance(t, str) else t.__name__
            if not meta.get("internal"):
                kinds[name] = _KIND_OF.get(text) or _KIND_OF.setdefault(text, _kind(text))
    return kinds


def _coerce(value: object, kind: _Kind, kpath: tuple[str, ...], loc: _Loc) -> object:
    """``value`` as ``kind`` holds it; a ConfigError at the line of ``kpath`` naming it when it does not fit."""
    try:
        return kind.convert(value)
    except _Refused as e:
        raise ConfigError(f"{loc.at(kpath)}: {'.'.join(kpath)}: expected {kind.expected}, got {value!r}"[:300]
                          + e.why) from None


def _unknown_key(key: str, path: tuple[str, ...], fields: list[str], loc: _Loc) -> ConfigError:
    kpath = path + (key,)
    kd = ".".join(kpath)
    if key in _SECRET_KEYS or key.endswith("_key"):
        return ConfigError(f"{loc.at(kpath)}: {kd}: secrets never go in the config file; "
                           f"name where the key comes from with {key}_env, {key}_file or "
                           f"{key}_credential instead")
    import difflib  # only for the hint in this error

    near = difflib.get_close_matches(key, fields, n=1, cutoff=0.6)
    hint = f"did you mean {'.'.join(path + (near[0],))!r}?" if near else \
        f"valid keys here: {', '.join(sorted(fields))}"
    return ConfigError(f"{loc.at(kpath)}: {kd}: unknown key; {hint}")


def _build(cls: type[_D], data: object, path: tuple[str, ...], loc: _Loc) -> _D:
    dotted = ".".join(path) or "(top level)"
    if not isinstance(data, dict):
        raise ConfigError(f"{loc.at(path)}: {dotted}: expected a mapping of settings, got {data!r}"[:300])
    kinds = _field_kinds(cls)
    kwargs: dict[str, object] = {}
    for key, value in data.items():
        kind = kinds.get(key)
        if kind is None:
            raise _unknown_key(key, path, list(kinds), loc)
        kpath = path + (key,)
        if kind.section is not None:
            kwargs[key] = _build(kind.section, value if value is not None else {}, kpath, loc)
        else:
            kwargs[key] = _coerce(value, kind, kpath, loc)
    return cls(**kwargs)


def cron_trigger(expr: str) -> CronTrigger:
    """APScheduler's own reading of a 5-field cron expression, in ``SCHEDULE_TIMEZONE``.

    Raises ``ValueError`` saying what is wrong. The config check and the daemon
    both use it, so an expression that loads is one the scheduler accepts.
    """
    from apscheduler.triggers.cron import CronTrigger

    return CronTrigger.from_crontab(expr, timezone=SCHEDULE_TIMEZONE)


_LOWER_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_LABEL_CHARS = _LOWER_ALNUM | {"-"}


def _is_agent_id(s: str) -> bool:
    """``[a-z0-9][a-z0-9-]{0,30}``, the whole of ``s``."""
    return 1 <= len(s) <= 31 and s[0] in _LOWER_ALNUM and set(s) <= _LABEL_CHARS


def _is_label_prefix(s: str) -> bool:
    """``[a-z0-9-]{1,16}``, the whole of ``s``."""
    return 1 <= len(s) <= 16 and set(s) <= _LABEL_CHARS


def _is_http_url(u: str) -> bool:
    """``^https?://`` at the start of ``u``."""
    return u.startswith(("http://", "https://"))


def _check_names(s: Settings, loc: _Loc) -> None:
    if not _is_agent_id(s.agent_id):
        raise loc.error("agent_id", "use 1-31 lowercase letters, digits and dashes "
                        "(it becomes part of instance labels)")
    if not _is_label_prefix(s.fleet.label_prefix):
        raise loc.error("fleet.label_prefix", "use 1-16 lowercase letters, digits and dashes")


def _check_context(c: ContextSettings, loc: _Loc) -> None:
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


def _check_schedule(sch: ScheduleSettings, loc: _Loc) -> None:
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


def _check_failover(st: StorageSettings, loc: _Loc) -> None:
    if not 3 <= float(st.failover_seconds) <= 3600:
        raise loc.error("storage.failover_seconds", f"must be between 3s and 1h (got {float(st.failover_seconds):g}s); "
                        "a standby takes over this long after the active daemon stops, e.g. 30s")


def _check_limits(s: Settings, loc: _Loc) -> None:
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
    if not 0 <= s.policy.min_reliability <= 1:
        raise loc.error("policy.min_reliability", "a share between 0 and 1")
    for u, key in ((s.vast.url, "vast.url"), (s.model.base_url, "model.base_url"), (s.demand.url, "demand.url")):
        if u is not None and not _is_http_url(u):
            raise loc.error(key, "must start with http:// or https://")


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
    if host in ("localhost", "127.0.0.1", "::1"):
        return True  # (the usual ones, without importing ipaddress)
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_http(h: HttpSettings, loc: _Loc) -> None:
    if h.listen is not None:
        try:
            host, _port = split_listen(h.listen)
        except ValueError as e:
            raise loc.error("http.listen", f"{e}; write e.g. 127.0.0.1:9464, or null for no endpoint") from None
        if not is_loopback(host) and h.token_file is None and h.token_credential is None:
            raise loc.error("http.listen", f"{host} is reachable beyond this machine and no token is set; set "
                            "http.token_file or http.token_credential, or listen on 127.0.0.1")
    if not h.token_name.strip() or len(h.token_name) > 64 or any(
            c in "[]" or not c.isprintable() for c in h.token_name):
        raise loc.error("http.token_name", "a name of 1-64 printable characters without brackets "
                        "(it is recorded as the operator on every action)")


def _check_storage(st: StorageSettings, loc: _Loc) -> None:
    if st.url is None:
        return
    if not st.url.strip():
        raise loc.error("storage.url", "is empty; write null (fleet-agent.db in data_dir), a SQLite file path, "
                        "or postgresql://USER@HOST:PORT/DATABASE")
    from agent.store.target import is_pg_url, url_problem

    if "://" in st.url and not is_pg_url(st.url):
        raise loc.error("storage.url", f"{st.url.split('://', 1)[0]}:// is not a database fleet-agent can use; "
                        "write a SQLite file path or postgresql://USER@HOST:PORT/DATABASE")
    problem = url_problem(st.url) if is_pg_url(st.url) else None
    if problem is not None:
        raise loc.error("storage.url", problem)


def _check(s: Settings, loc: _Loc) -> None:
    """Rules across values that types alone cannot state; the first broken one is raised."""
    _check_names(s, loc)
    _check_context(s.context, loc)
    _check_schedule(s.schedule, loc)
    _check_limits(s, loc)
    _check_http(s.http, loc)
    _check_storage(s.storage, loc)
    _check_archive(s.storage, loc)
    _check_failover(s.storage, loc)


def _archive_url_ok(u: str) -> bool:
    """s3://bucket/prefix with a valid bucket name, or file:///directory (the pattern compiles only when
    the setting is there)."""
    import re

    return re.fullmatch(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/\S*)?|file:///\S+", u) is not None


def _check_archive(st: StorageSettings, loc: _Loc) -> None:
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
    data, loc = _parse_yaml(text, file)
    s = _build(Settings, data, (), loc)
    _check(s, loc)
    return replace(s, source_path=None if file.startswith("<") else file)


def path_text(p: str) -> str:
    """``str(Path(p))``, without importing pathlib: empty and ``.`` parts dropped, slashes collapsed (a
    leading ``//``, exactly two, kept), ``.`` for nothing."""
    rel = p.lstrip("/")
    root = "" if rel == p else "//" if len(p) - len(rel) == 2 else "/"
    return root + "/".join(x for x in rel.split("/") if x and x != ".") or "."


_NOT_THERE = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)


def _is_file(p: str) -> bool:
    """``Path(p).is_file()`` for ``p`` as ``path_text`` gives it: a regular file (through symlinks); False when
    there is nothing there, an error (e.g. no permission to look) raised as pathlib raises it."""
    try:
        return stat.S_ISREG(os.stat(p).st_mode)
    except OSError as e:
        if e.errno in _NOT_THERE:
            return False
        raise
    except ValueError:  # (a NUL in the path)
        return False


def _find_config(explicit: str | None, env: Mapping[str, str] | None) -> str:
    """``find_config``'s answer as text."""
    env = os.environ if env is None else env
    if explicit:
        p = path_text(explicit)
        if not _is_file(p):
            raise ConfigError(f"{explicit}: no such config file; create one with 'fleet-agent init' "
                              "or copy config.example.yaml")
        return p
    if env.get("FLEET_AGENT_CONFIG"):
        p = path_text(env["FLEET_AGENT_CONFIG"])
        if not _is_file(p):
            raise ConfigError(f"$FLEET_AGENT_CONFIG={p}: no such file")
        return p
    for cand in SEARCH_PATHS:
        if _is_file(p := path_text(cand)):
            return p
    raise ConfigError("no config file found (looked at --config, $FLEET_AGENT_CONFIG, "
                      f"{', '.join(SEARCH_PATHS)}); run 'fleet-agent init' to create one")


def find_config(explicit: str | None, env: Mapping[str, str] | None = None) -> Path:
    """The config file: ``explicit`` (``--config``), else ``$FLEET_AGENT_CONFIG``, else the first of
    ``SEARCH_PATHS`` that is a file; a ConfigError saying where it looked when there is none."""
    from pathlib import Path

    return Path(_find_config(explicit, env))


def load(explicit: str | None = None, env: Mapping[str, str] | None = None) -> Settings:
    p = _find_config(explicit, env)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not UTF-8 text; save the config as UTF-8") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror}") from None
    return parse(text, p)


def example_text() -> str:
    from importlib import resources

    return resources.files("agent").joinpath("config.example.yaml").read_text(encoding="utf-8")
