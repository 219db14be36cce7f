"""The pieces a command needs, built lazily from settings: log, prompts, clients.

The CLI, the daemon and the demo all go through one ``App`` so each part is
made the same way everywhere (and closed in one place).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

from agent.errors import ConfigError, LogError

if TYPE_CHECKING:
    from pathlib import Path  # the log, the clients and the model SDK load only when a command uses them
    from typing import Any

    from agent.clients.demand import DemandClient
    from agent.clients.vast import VastClient
    from agent.config import Settings
    from agent.context.cache import ProjectionCache
    from agent.context.prompts import Prompts
    from agent.feedback.knowledge import StatMemo
    from agent.model.llm import ChatProvider
    from agent.store.log import EventLog
    from agent.store.queries import Store
    from agent.store.segments import Remote


class App:
    """Settings plus the objects built from them, each made on first use and closed by ``close()``.

    ``provider`` and ``prompts``, when given, are used instead of building them
    (a test's scripted model; the prompts the daemon read at start or reload).
    ``lock_held`` says the caller (the daemon) holds the single-writer lock, so a
    tick must not take it again; ``fence`` is the daemon's leadership check, which
    the log runs before every append commits and the vast.ai client before every request.
    ``hold`` (the daemon's ``Leader.hold``) runs every COMMIT of the log and every write of a request to
    vast.ai, the demand source and the model onto its socket: each only while the fleet's lock is ours.
    ``verify_writes`` (an operator's command, the console): before its first append commits, the log is
    verified as the daemon verifies it at start (since the checkpoint), so nothing is added to a log the
    daemon would refuse as tampered.
    """

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] | None = None, provider: ChatProvider | None = None,
                 prompts: Prompts | None = None, lock_held: bool = False,
                 fence: Callable[[], None] | None = None, verify_writes: bool = False,
                 broken: Mapping[str, ConfigError] | None = None,
                 hold: Callable[[Callable[[], Any]], Any] | None = None) -> None:
        self.settings = settings
        # Parts of the config file set aside as broken (``agent.config.load_partial``): ``require`` refuses them.
        self.broken = dict(broken or {})
        self.fence = fence  # the daemon's leadership check: the log calls it before each append commits
        self.hold = hold  # the daemon's Leader.hold: each commit and each request's write runs inside it
        self.verify_writes = verify_writes
        self.env = env
        self.clock = clock or time.time  # the fleet's clock (the simulator's, in demos and tests)
        self.lock_held = lock_held
        self._provider = provider
        self._prompts = prompts
        self._log: EventLog | None = None
        self._reader: tuple[Any, Store] | None = None  # a connection of ``store``'s own and its queries
        self._vast: VastClient | None = None
        self._demand: DemandClient | None = None

    def require(self, *parts: str) -> None:
        """Refuse (the file's ConfigError, at its line) when one of the config's ``parts`` is broken."""
        for part in parts:
            if part in self.broken:
                raise self.broken[part]

    def sections_in_force(self, *names: str) -> list[str]:
        """Replace each of the sections ``names`` that is broken in the file by the one the daemon last put in
        force (its latest ``config.applied`` or ``config.changed``): what the fleet runs on while the file is
        broken. The names replaced; a section the log holds no valid record of stays broken."""
        from dataclasses import replace

        from agent.config import broken_error, section_from

        todo = [n for n in names if broken_error(getattr(self.settings, n)) is not None]
        if not todo:
            return []
        try:
            rec = next(iter(self.log.read(0, kinds=["config.applied", "config.changed"], newest_first=True,
                                          limit=1)), None)
        except LogError:  # no log to read it from: the sections stay broken
            return []
        flat = rec.payload.get("settings") if rec is not None else None
        if not isinstance(flat, dict):
            return []
        found = {n: sec for n in todo if (sec := section_from(flat, n)) is not None}
        self.settings = replace(self.settings, **found)
        self.close()  # opened with the context's defaults: the next use opens the log as configured
        return sorted(found)

    def vast(self) -> VastClient:
        """A vast.ai client (one per App, reused across ticks)."""
        if self._vast is None:
            from agent.clients.vast import VastClient

            v = self.settings.vast
            self._vast = VastClient(v.url, self.settings.vast_api_key(self.env).reveal(), timeout=v.timeout,
                                    max_attempts=v.max_attempts, min_interval=v.min_interval, hold=self.hold)
            self._vast.fence = self._before_send
        return self._vast

    def _before_send(self) -> None:
        """Before any request leaves for another system: the daemon's leadership check."""
        if self.fence is not None:
            self.fence()

    def demand(self) -> DemandClient | None:
        """The job queue's client, or None when no ``demand.url`` is set."""
        if not self.settings.demand.url:
            return None
        if self._demand is None:
            from agent.clients.demand import DemandClient

            self._demand = DemandClient(self.settings.demand.url, hold=self.hold)
            self._demand.fence = self._before_send
        return self._demand

    def provider(self) -> ChatProvider:
        """The model: an OpenAI-compatible server, or the built-in rules provider."""
        if self._provider is None:
            self._provider = self._make_provider()
        return self._provider

    def _make_provider(self) -> ChatProvider:
        m = self.settings.model
        if m.provider == "rules":
            from agent.model.rules import RulesProvider

            return RulesProvider(self)
        key = self.settings.model_api_key(self.env)
        from agent.model.llm import OpenAIChat

        return OpenAIChat(base_url=m.base_url, model=m.name, api_key=key.reveal() if key else None,
                          timeout=m.timeout, temperature=m.temperature, max_tokens=m.max_output_tokens,
                          max_retries=m.max_retries, retry_timeouts=m.retry_timeouts, hold=self.hold)

    def now(self) -> datetime:
        """The fleet's clock as a UTC time: what the log stamps its events with."""
        return datetime.fromtimestamp(self.clock(), UTC)

    @property
    def store(self) -> Store:
        """The read models' queries for a command that only reads them (``alerts list``): the log's own when
        it is open; else, for a SQLite log, over a connection opened (and migrated) as the log's is, without
        loading the event log itself (its append, verify and payload machinery)."""
        if self._log is not None or self.settings.storage.is_pg:
            return self.log.store
        if self._reader is None:
            from agent.store.db import connect
            from agent.store.queries import Store

            conn = connect(self.settings.db_file, create=False)
            self._reader = (conn, Store(conn))
        return self._reader[1]

    @property
    def log(self) -> EventLog:
        """The event log (opened, and migrated, on first use)."""
        if self._log is None:
            from agent.config import ContextSettings, broken_error
            from agent.store.log import EventLog

            # The encoding only counts tokens (the context view, the console: commands that read ``context``);
            # with that section broken, reading and appending need not stop.
            c = ContextSettings() if broken_error(self.settings.context) else self.settings.context
            # Events are stamped with the fleet's clock, so policy windows ("rents in the last hour")
            # and observations share one notion of time (wall time in production).
            # A SQLite file is opened by its name: pathlib loads only where a Path is asked for.
            st = self.settings
            target = st.log_target(self.env) if st.storage.is_pg else st.db_file
            self._log = EventLog(target, encoding=c.encoding, encoding_file=c.encoding_file,
                                 encoding_sha256=c.encoding_sha256,
                                 clock=self.now, create=False)
            if self.settings.storage.archive_url:
                self._log.segment_files.open_remote = self.archive_remote
            self._log.fence = self.fence
            self._log.commit_guard = self.hold
            if self.fence is None and self.verify_writes:
                self._log.fence = _verified_once(self._log)
            if self.fence is not None:  # the daemon's log: a suspended holder must not block its successor
                from agent.store.pglock import bound_idle_transactions

                bound_idle_transactions(self._log, float(self.settings.storage.failover_seconds) / 2)
        return self._log

    def archive_remote(self) -> Remote:
        """Where segment copies go (storage.archive_url), with its key pair; ConfigError without the setting."""
        from agent.store.segments import S3Credentials, open_remote

        st = self.settings.storage
        if not st.archive_url:
            raise ConfigError("storage.archive_url is not set; set it to s3://bucket/prefix or file:///directory")
        pair = self.settings.s3_credentials(self.env)
        creds = S3Credentials(*pair) if pair else None
        return open_remote(st.archive_url, endpoint_url=st.s3_endpoint_url, region=st.s3_region, credentials=creds)

    def init_database(self, *, exist_ok: bool = False) -> Path:
        """Create the data directory (0700) and the database (0600, migrated): the only way a database
        comes to exist (``fleet-agent init``, the demo, the tests). Every other use opens an existing one.

        An existing database is refused unless ``exist_ok``; then it must be a sound one (not empty).
        On PostgreSQL the schema is applied when missing, and a fleet that already has events is refused
        the same way."""
        if self.settings.storage.is_pg:
            return self._init_pg(exist_ok=exist_ok)
        from agent.store.db import check_database_file
        from agent.store.log import EventLog

        p = self.settings.db_path
        if p.exists() or p.is_symlink():
            if not exist_ok:
                raise LogError(f"{p} already exists; init refuses to touch an existing database "
                               "(use it as it is, or move it away first)")
            check_database_file(p)
        try:
            EventLog(p, create=True).close()
        except OSError as e:
            raise LogError(f"cannot create the database {p}: {e.strerror}; create the data directory "
                           "writable by the user running fleet-agent, or set data_dir") from None
        return p

    def _init_pg(self, *, exist_ok: bool) -> Path:
        target = self.settings.log_target(self.env)
        self.settings.data_path.mkdir(parents=True, exist_ok=True, mode=0o700)  # the head and checkpoint files
        from agent.store.log import EventLog

        with EventLog(target, create=True) as log:
            if log.last_seq() > 0 and not exist_ok:
                raise LogError(f"{target} already holds events; init refuses to touch an existing log "
                               "(use it as it is, or choose another agent_id)")
        from pathlib import Path

        return Path(self.settings.log_location)

    @cached_property
    def projection_cache(self) -> ProjectionCache:
        """Token counts and rendered messages shared by every projection this process makes, and with the
        next process through the count file in the data directory."""
        from agent.context.cache import COUNT_FILE, CountFile, ProjectionCache

        return ProjectionCache(counts=CountFile(self.settings.data_path / COUNT_FILE))

    @cached_property
    def knowledge_memo(self) -> StatMemo:
        """The stat and hash of each knowledge file as last read: a tick re-reads only changed files. Starts
        from the copy the last scan saved beside the database (``status`` reads it too)."""
        from agent.feedback.knowledge import load_memo

        return load_memo(self.settings.data_path)

    @property
    def prompts(self) -> Prompts:
        """The prompt files (read on first use unless given to the constructor)."""
        if self._prompts is None:
            from agent.context.prompts import load_prompts

            self.require("prompts_dir")
            self._prompts = load_prompts(self.settings.prompts_path)
        return self._prompts

    def policy_dict(self) -> dict[str, Any]:
        """The fleet policy as the system prompt states it (what code enforces)."""
        d = asdict(self.settings.policy)
        f = self.settings.fleet
        d["fleet_template"] = {"image": f.image, "disk_gb": f.disk_gb, "label_prefix": f.label_prefix}
        return d

    def steering_view(self) -> Any:
        """What binds the fleet now and what the operators' words in force say (directives, knowledge files and the
        notes in the model's context: ``agent.fleet.constraints.operators_view``), for planners below the fleet
        layer (the rules provider)."""
        from agent.fleet.constraints import operators_view

        return operators_view(self.settings, self.log)

    def traffic_dph(self, ids: Iterable[int]) -> dict[int, float]:
        """Each of these instances' traffic $/h as its billed counters measured it (``agent.fleet.market``), for
        planners below the fleet layer (the rules provider)."""
        from agent.fleet.market import traffic_dph

        return traffic_dph(self.log, ids)

    def throughput(self, dlperf: Mapping[str, float] | None = None) -> Any:
        """Each GPU model's jobs/h per GPU (``agent.fleet.throughput.Throughput``) from the log's recent
        observations, a model not measured priced by its vast.ai dlperf per GPU (``dlperf`` adds models the
        observations do not name), for planners below the fleet layer."""
        from agent.fleet import throughput

        return throughput.estimate(self.log, self.settings).with_dlperf(dlperf or {})

    def tool_specs(self) -> list[dict[str, Any]]:
        """The specs of the installed tools (found through their entry point), in name order."""
        from agent.fleet.toolkit import load_tools

        return load_tools().specs()

    def close(self) -> None:
        """Close the clients and the log; the next use opens them again."""
        for client in (self._vast, self._demand):
            if client is not None:
                client.close()
        self._vast = self._demand = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._reader is not None:
            self._reader[0].close()
            self._reader = None


def _verified_once(log: EventLog) -> Callable[[], None]:
    """A fence that verifies the log (``check_before_append``: ChainBroken, rolling the append back, when it
    does not verify) before the first append commits, and passes after that."""
    done: list[bool] = []

    def fence() -> None:
        if not done:
            log.check_before_append()
            done.append(True)

    return fence
