"""Shared fixtures: the simulator (tests/conftest_sim.py), the scripted model, and an App factory.

    fake_model  a FakeOpenAI server on 127.0.0.1, stopped after the test
    make_app    make_app(provider=..., policy={...}, model={...}, ...) -> App wired to the
                simulator (vast + demand), the fake model (or the rules provider), a real
                SQLite file under tmp_path and the simulator's ManualClock; closed after the test
                (its vast.ai client waits on the simulator's FastWall: no real sleeps)
    settings_for(tmp_path, sim_url, ...)  the same Settings, for subprocesses and custom Apps
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from agent import config
from agent.config import Settings
from agent.runtime.app import App
from agent.sim import ManualClock, SimServer, Simulator
from tests.fakes.openai_server import FakeOpenAI
from tests.fakes.wall import fast_waits

pytest_plugins = ["tests.conftest_sim", "tests.pgserver"]

# Property tests: never fail on how fast a loaded machine generates examples (no per-example deadline, no
# too-slow health check). Under CI (``CI`` set) they also draw the same examples on every run, so a red
# CI run means the code changed, not that this run's random draw differed; elsewhere each run explores
# new examples. A test's own @settings still wins for the fields it names.
hypothesis_settings.register_profile("fleet-agent", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.register_profile("fleet-agent-ci", hypothesis_settings.get_profile("fleet-agent"),
                                     derandomize=True, database=None)
hypothesis_settings.load_profile("fleet-agent-ci" if os.environ.get("CI") else "fleet-agent")

# Validated configs (agent.config.ConfigCache) are kept in this session's own directory, not the user's cache,
# by the commands tests run in-process and in subprocesses alike.
os.environ.setdefault("FLEET_AGENT_CONFIG_CACHE", tempfile.mkdtemp(prefix="fleet-agent-config-cache-"))


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    """Each test starts from structlog's defaults: a test that ran the CLI in-process (which
    configures a warning-level filter) must not hide info lines from the next test's capture_logs."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


def settings_for(tmp_path: Path, sim_url: str, *, model_url: str | None = None, provider: str = "openai",
                 demand: bool = True, **sections: dict[str, Any]) -> Settings:
    """The example config with vast.ai, demand and the model pointed at local servers.

    ``sections`` override fields of one settings section each, e.g.
    ``policy={"max_instances": 3}``, ``model={"timeout": 0.3}``, ``schedule={"max_steps": 4}``.
    The model defaults to no SDK retries so a scripted error is seen once.
    """
    s = config.parse(config.example_text(), str(tmp_path / "config.yaml"))
    model = {"provider": provider, "max_retries": 0, **({"base_url": model_url} if model_url else {})}
    merged: dict[str, dict[str, Any]] = {"model": model}
    for name, fields in sections.items():
        merged[name] = {**merged.get(name, {}), **fields}
    top: dict[str, Any] = {
        "vast": dataclasses.replace(s.vast, url=sim_url),
        "demand": dataclasses.replace(s.demand, url=f"{sim_url}/demand" if demand else None),
    }
    for name, fields in merged.items():
        top[name] = dataclasses.replace(top.get(name, getattr(s, name)), **fields)
    return dataclasses.replace(s, **top)


def init_database(cfg: Path) -> Path:
    """Create the database the config at ``cfg`` names, through the path 'fleet-agent init' takes."""
    app = App(config.load(str(cfg)))
    try:
        return app.init_database(exist_ok=True)
    finally:
        app.close()


@pytest.fixture
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as fake:
        yield fake


MakeApp = Callable[..., App]


@pytest.fixture
def make_app(tmp_path: Path, sim: Simulator, sim_server: SimServer, sim_clock: ManualClock,
             storage_url: str | None, request: pytest.FixtureRequest) -> Iterator[MakeApp]:
    """A factory: ``make_app(provider="openai"|"rules", model_server=None, **sections)``.

    With ``provider="openai"`` the App talks to ``model_server`` (the ``fake_model`` fixture
    when not given). Every App made shares tmp_path's data directory, so a second App is
    "the next process" over the same log.
    """
    apps: list[App] = []

    def make(*, provider: str = "openai", model_server: FakeOpenAI | None = None, demand: bool = True,
             chat: Any = None, **sections: dict[str, Any]) -> App:
        url = None
        if provider == "openai" and chat is None:
            fake = model_server or request.getfixturevalue("fake_model")
            url = fake.base_url
        if storage_url is not None and "storage" not in sections:
            sections["storage"] = {"url": storage_url}
        s = settings_for(tmp_path, sim_server.url, model_url=url, provider=provider, demand=demand, **sections)
        app = App(s, env={"VAST_API_KEY": sim.api_key}, clock=sim_clock, provider=chat)
        fast_waits(sim, app.vast())  # pacing and log polls move the simulator's wall clock, not real time
        app.init_database(exist_ok=True)  # the first App creates it, as 'fleet-agent init' does
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


# ------------------------------------------------------------------ storage backends
# A module runs its tests on both backends with ``pytestmark = pytest.mark.usefixtures("backend")``: each
# test runs on SQLite and on PostgreSQL (a throwaway server, tests/pgserver.py); ``make_app`` and
# ``new_log`` then open the log there. Without ``backend`` they use SQLite, as before.


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest) -> str:
    """The storage backend this test runs on."""
    return str(request.param)


@pytest.fixture
def storage_url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """storage.url for this test: None (SQLite in data_dir) unless it runs on PostgreSQL, then an empty
    database owned by a fresh ordinary role (from the server's pool, reset after the test)."""
    if "backend" not in request.fixturenames or request.getfixturevalue("backend") == "sqlite":
        yield None
        return
    from tests.pgserver import fleet_database

    with fleet_database(request.getfixturevalue("pg_server")) as url:
        yield url


@pytest.fixture
def new_log(storage_url: str | None, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``new_log(name="log", agent_id="fleet-1", **kw)`` -> an EventLog on this test's backend: the SQLite
    file tmp_path/NAME.db, or fleet AGENT_ID in the test's PostgreSQL database (state files in tmp_path).
    Logs opened through it are closed after the test."""
    from agent.config import PgTarget
    from agent.store.log import EventLog

    opened: list[EventLog] = []

    def make(name: str = "log", agent_id: str = "fleet-1", **kw: Any) -> EventLog:
        where: Path | PgTarget = tmp_path / f"{name}.db"
        if storage_url is not None:
            where = PgTarget(storage_url, agent_id, state_dir=tmp_path)
        log = EventLog(where, **kw)
        opened.append(log)
        return log

    yield make
    for log in opened:
        log.close()


# ------------------------------------------------------------------ helpers for tick tests


def events_of(app: App, kind: str, tick: int | None = None) -> list[Any]:
    """Every event of ``kind`` (optionally of one tick), in log order."""
    return list(app.log.read(0, kinds=[kind], tick=tick))


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool messages of a chat request body, in order."""
    return [m for m in body.get("messages", []) if m.get("role") == "tool"]


def offer_rows(tool_content: str) -> list[dict[str, Any]]:
    """The rows of a search_offers table as the model sees it inside a tool message."""
    rows = []
    for line in tool_content.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 5 and parts[0].isdigit():
            rows.append({"id": int(parts[0]), "gpu": parts[1], "dph": float(parts[2]), "host": int(parts[4])})
    return rows


def rent_puts(sim: Simulator, offer_id: int | None = None) -> list[dict[str, Any]]:
    """The rent requests (PUT /api/v0/asks/<id>/) the simulator received."""
    out = []
    for r in list(sim.requests):
        if r["method"] == "PUT" and r["path"].startswith("/api/v0/asks/"):
            if offer_id is None or r["path"].rstrip("/").endswith(f"/{offer_id}"):
                out.append(r)
    return out


def mutating_requests(sim: Simulator) -> list[dict[str, Any]]:
    """Requests that would change the fleet: rent, destroy, reboot/modify."""
    return [r for r in list(sim.requests)
            if (r["method"] == "PUT" and (r["path"].startswith("/api/v0/asks/")
                                          or (r["path"].startswith("/api/v0/instances/")
                                              and "request_logs" not in r["path"])))
            or r["method"] == "DELETE"]


def plant_ours(app: App, sim: Simulator, offer_id: int, key: str = "feedc0ffee01") -> int:
    """An instance carrying our label that the log knows as ours (``instance.adopted``, as reconcile
    records one of our rents it finds): ownership comes from the log, not from the label alone."""
    label = app.settings.fleet.label_prefix + app.settings.agent_id + "-" + key
    iid = sim.create_instance(offer_id, label=label)
    app.log.append("instance.adopted", {"instance_id": iid, "label": label, "idem_key": key}, "system")
    return iid


def within_policy(settings: Settings, offer: dict[str, Any]) -> bool:
    """Whether a simulator offer passes the rent policy's per-offer rules (GPU, price with the fleet's disk,
    reliability) and takes the fleet's disk."""
    from agent.fleet.block import norm_gpu

    p = settings.policy
    return (norm_gpu(offer["gpu_name"]) in {norm_gpu(g) for g in p.allowed_gpus}
            and priced(settings, offer) <= p.max_dph_per_instance and offer["reliability"] >= p.min_reliability
            and offer["disk_space"] >= settings.fleet.disk_gb)


def priced(settings: Settings, offer: dict[str, Any]) -> float:
    """The offer's $/h as a search for the fleet's disk shows it (vast.ai adds the storage rented)."""
    from agent.sim.market import with_storage

    return with_storage(offer["dph_base"], settings.fleet.disk_gb, offer["storage_cost"])


def good_offer(sim: Simulator, settings: Settings) -> dict[str, Any]:
    """The cheapest unrented offer within policy on a host that behaves (it reaches running), with disk
    enough for the fleet's template."""
    return next(o for o in sorted(sim.offers.values(), key=lambda o: (o["dph_total"], o["id"]))
                if within_policy(settings, o) and not o["rented"] and o["host_id"] not in sim.bad_hosts
                and o["disk_space"] >= settings.fleet.disk_gb)
