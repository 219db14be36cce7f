"""Shared machinery of the reliability suite and ``bench/reliability.py``.

    write_config(root, sim_url, ...)   a config file for CLI runs against a local simulator
    CountingSim                        the simulator, counting the faults it injects per kind
    running_sim(...)                   a CountingSim served on 127.0.0.1 with a ManualClock
    Zygote / ExecSpawner               start ``fleet-agent ...`` processes that can be SIGKILLed
    ChainWatch                         remembers every (seq, hash) read; says if any changed
    check_db(path)                     integrity_check, hash chain, seq gaps, read-model rebuild
    audit_rentals(sim, db, base)       duplicate rentals, untraced and untracked instances
    audit_intents(sim, db)             requests per intent, "adopted after destroyed"
    CapMonitor                         polls the simulator's own state every 0.5 s for over-cap moments
    run_kill9(...)                     the kill -9 loop, returning its figures

The Zygote is a long-lived Python process with fleet-agent already imported; for each
run it forks a child that runs ``agent.cli.main(argv)``: the code path of the
``fleet-agent`` console script, in a fresh process, at a fraction of the start-up cost.
``ExecSpawner`` runs the real console script (slower; the bench uses it for a share of
the kills).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agent.fleet.drain import DRAINING
from agent.sim import ManualClock, Reply, SimServer, Simulator
from agent.sim.clock import DEFAULT_START
from tests.conftest import init_database
from tests.fakes.wall import fast_waits

ROOT = Path(__file__).resolve().parents[2]
AGENT_ID = "rel"
LABEL_BASE = f"fa-{AGENT_ID}-"
SIM_KEY = "rel-sim-key-0001"
FAULT_KINDS = ("429_text", "429_quota", "500", "503", "slow", "ambiguous_500", "ambiguous_hang",
               "after_action_500", "after_action_late", "lag_destroy_fail", "lag_destroy_drop", "lag_destroy_late")
LAG_DESTROY_MODES = ("fail", "drop", "late")  # answer lost before vast.ai acts / after it acts / acts late


# ------------------------------------------------------------------ config


def config_dict(sim_url: str, *, provider: str = "rules", model_url: str | None = None,
                vast_key_file: str | None = "vast_api_key", **sections: dict[str, Any]) -> dict[str, Any]:
    """Settings for a run against the simulator; ``sections`` override single fields."""
    d: dict[str, Any] = {
        "agent_id": AGENT_ID,
        "data_dir": "./data",
        "knowledge_dir": "./knowledge",
        "logging": {"level": "info", "format": "json"},
        "schedule": {"max_steps": 4, "tick_timeout": "60s"},
        "vast": {"url": sim_url, "api_key_env": "VAST_API_KEY", "api_key_file": vast_key_file,
                 "timeout": 0.5, "max_attempts": 3},
        "demand": {"url": f"{sim_url}/demand"},
        "model": {"provider": provider, "base_url": model_url or "http://127.0.0.1:9/v1",
                  "name": "rules-provider" if provider == "rules" else "fake-model", "timeout": 1.0,
                  "max_retries": 0},
        "policy": {"max_instances": 6, "max_total_dph": 20.0, "max_dph_per_instance": 2.5,
                   "max_rents_per_hour": 100_000, "max_destroys_per_hour": 100_000},
        "alerts": {"stuck_after": "15m"},
    }
    if _STORAGE[0] is not None:
        d["storage"] = {"url": _STORAGE[0]}
    for name, fields in sections.items():
        d[name] = {**d.get(name, {}), **fields}
    return d


# The storage the configs name: None = SQLite in root/data; a postgresql:// URL (set through
# ``use_storage`` by the reliability suite's backend fixture) = fleet AGENT_ID in that database.
_STORAGE: list[str | None] = [None]


def use_storage(url: str | None) -> None:
    _STORAGE[0] = url


def write_config(root: Path, sim_url: str, *, key: str = SIM_KEY, **kw: Any) -> Path:
    """root/config.yaml (+ the key file and an empty knowledge dir); returns the config path."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "knowledge").mkdir(exist_ok=True)
    d = config_dict(sim_url, **kw)
    if d["vast"].get("api_key_file"):
        kf = root / d["vast"]["api_key_file"]
        kf.write_text(key + "\n", encoding="utf-8")
        os.chmod(kf, 0o600)
    cfg = root / "config.yaml"
    cfg.write_text(yaml.safe_dump(d, sort_keys=False), encoding="utf-8")
    init_database(cfg)
    return cfg


def db_path(root: Path) -> Any:
    """Where the run's log lives: the SQLite file, or the fleet in the PostgreSQL database."""
    if _STORAGE[0] is None:
        return root / "data" / "fleet-agent.db"
    from agent.config import PgTarget

    return PgTarget(_STORAGE[0], AGENT_ID, state_dir=root / "data")


def log_exists(where: Any) -> bool:
    """Whether the run's log is there to check (a PostgreSQL one is, from write_config's init on)."""
    return where.exists() if isinstance(where, Path) else True


# ------------------------------------------------------------------ the simulator


class CountingSim(Simulator):
    """The simulator, counting each fault it injects by kind (the base counts only a total)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.fault_counts: dict[str, int] = dict.fromkeys(FAULT_KINDS, 0)
        self.late_in_flight = 0  # requests received whose late delivery (Reply.then) has not run yet
        # The fault proxy's aim at the listing lag: a DELETE of an instance vast.ai does not list yet (it was
        # rented less than listing_lag ago) loses its answer with this probability, before vast.ai acts
        # ("fail"), after ("drop") or reaches it only late ("late").
        self.lag_destroy_rate = 0.0
        self.lag_destroy_modes: tuple[str, ...] = LAG_DESTROY_MODES
        self.lag_deletes = 0  # DELETEs of an instance inside its listing lag, faulted or not
        self._lag_rng = random.Random(kw.get("seed", 0) * 7919 + 1)

    def _aim_at_lag(self, method: str, target: str) -> None:
        """Plan a lost answer for a DELETE of an instance inside its listing lag (see ``lag_destroy_rate``)."""
        if method != "DELETE" or not target.startswith("/api/v0/instances/"):
            return
        tail = target.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if not tail.isdigit():
            return
        path = target.split("?", 1)[0]
        with self._lock:
            inst = self.instances.get(int(tail))
            if inst is None or self._is_listed(inst, self.clock()):
                return
            self.lag_deletes += 1
            if self._lag_rng.random() >= self.lag_destroy_rate:
                return
            mode = self._lag_rng.choice(self.lag_destroy_modes)
            self.fault_counts[f"lag_destroy_{mode}"] += 1
            # first in the plan: the scripted action of exactly this request
            self.faults.script.insert(0, {"method": "DELETE", "path": path, "action": mode})

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes, base_url: str) -> Reply:
        self._aim_at_lag(method, target)
        r = super().handle(method, target, headers, body, base_url)
        if r.then is not None:
            deliver = r.then
            with self._lock:
                self.late_in_flight += 1

            def then() -> Reply:
                try:
                    return deliver()
                finally:
                    with self._lock:
                        self.late_in_flight -= 1

            r.then = then
        return r

    def wait_late_landed(self, timeout: float = 60.0) -> None:
        """Wait until every request that reaches vast.ai late has landed (acted), however loaded the machine."""
        deadline = time.monotonic() + timeout
        while self.late_in_flight:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.late_in_flight} late request(s) never landed")
            time.sleep(0.02)

    def _draw_fault(self, path: str) -> Reply | None:
        r = super()._draw_fault(path)
        if r is not None:
            if r.status == 429:
                self.fault_counts["429_text" if r.content_type.startswith("text/") else "429_quota"] += 1
            elif r.status in (500, 503):
                self.fault_counts[str(r.status)] += 1
            if r.delay:
                self.fault_counts["slow"] += 1
        return r

    def _after_action(self, method: str, path: str) -> str | None:
        got = super()._after_action(method, path)
        if got is not None:
            self.fault_counts["after_action_500" if got == "drop" else "after_action_late"] += 1
        return got

    def _rent(self, offer_id: int, body: dict[str, Any], now: float) -> Reply:
        r = super()._rent(offer_id, body, now)
        if r.status == 500:
            self.fault_counts["ambiguous_500"] += 1
        elif r.delay:
            self.fault_counts["ambiguous_hang"] += 1
        return r

    def quiet(self) -> None:
        """No more faults."""
        with self._lock:
            self.lag_destroy_rate = 0.0
            self.faults.update({"rate_429_text": 0.0, "rate_429_quota": 0.0, "rate_500": 0.0, "rate_503": 0.0,
                                "rate_slow": 0.0, "ambiguous_rent": 0.0, "rate_after_action": 0.0})


@contextlib.contextmanager
def running_sim(seed: int = 3, *, api_key: str = SIM_KEY,
                start: float | None = None) -> Iterator[tuple[CountingSim, SimServer]]:
    # at the wall clock's time by default: daemons under test read theirs, and vast.ai's end dates are absolute;
    # an in-process run on the simulator's own clock may pin ``start`` so its market is the same every day
    clock = ManualClock(start=time.time() if start is None else start)
    sim = CountingSim(seed=seed, clock=clock, api_key=api_key)
    server = SimServer(sim).start()
    try:
        yield sim, server
    finally:
        server.stop()


def chaos_faults(total: float, *, ambiguous: float = 0.0, slow: float = 0.0, slow_seconds: float = 1.0,
                 hang_seconds: float = 1.0) -> dict[str, Any]:
    """Fault rates summing to ``total`` over the four error kinds (plus slow/ambiguous rents)."""
    return {"rate_429_text": total * 0.3, "rate_429_quota": total * 0.2, "rate_500": total * 0.3,
            "rate_503": total * 0.2, "retry_after": 0, "rate_slow": slow, "slow_seconds": slow_seconds,
            "ambiguous_rent": ambiguous, "hang_seconds": hang_seconds}


def mutating(req: dict[str, Any]) -> bool:
    p = req["path"]
    return (req["method"] == "PUT" and (p.startswith("/api/v0/asks/") or
                                        (p.startswith("/api/v0/instances/") and "request_logs" not in p))) \
        or req["method"] == "DELETE"


def make_app(root: Path, sim: Simulator, server: SimServer, *, provider_obj: Any = None, **kw: Any) -> Any:
    """An in-process App over root/config.yaml, on the simulator's clock; its vast.ai client's waits
    take no real time (tests/fakes/wall.py)."""
    from agent import config
    from agent.runtime.app import App

    cfg = write_config(root, server.url, key=sim.api_key, **kw)
    app = App(config.load(str(cfg)), env={"VAST_API_KEY": sim.api_key}, clock=sim.clock, provider=provider_obj)
    fast_waits(sim, app.vast())  # pacing and back-off move the simulator's wall clock, not real time
    return app


def tick_terminals(log: Any) -> dict[int, list[str]]:
    """tick number -> the kinds of its ending events (tick.completed / tick.failed)."""
    out: dict[int, list[str]] = {}
    for e in log.read(0, kinds=["tick.completed", "tick.failed"]):
        out.setdefault(e.tick, []).append(e.kind)
    return out


def tool_context(app: Any, tick: int) -> Any:
    """A real ToolContext, built as the tick builds it, with a fresh listing."""
    from agent.fleet.policy import Policy
    from agent.fleet.toolkit import ToolContext

    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=app.demand(),
                      policy=Policy(app.settings), tick=tick, clock=app.clock)
    ctx.refresh()
    return ctx


def _rent_violations(offer: dict[str, Any], body: dict[str, Any], oid: int, settings: Any, base: str) -> list[str]:
    """What is wrong with one rent request that reached the simulator."""
    from agent.fleet.block import norm_gpu

    p, f = settings.policy, settings.fleet
    out: list[str] = []
    if norm_gpu(offer.get("gpu_name")) not in {norm_gpu(g) for g in p.allowed_gpus}:
        out.append(f"rent of {offer.get('gpu_name')} (offer {oid})")
    if (offer.get("dph_total") or 0) > p.max_dph_per_instance:
        out.append(f"rent at ${offer.get('dph_total')}/h (offer {oid})")
    if (offer.get("reliability") or 0) < p.min_reliability:
        out.append(f"rent at reliability {offer.get('reliability')} (offer {oid})")
    if (body.get("image"), body.get("onstart"), body.get("env") or {}, float(body.get("disk") or 0)) != \
            (f.image, f.onstart, dict(f.env), float(f.disk_gb)):
        out.append(f"rent off the template: {body.get('image')!r} {body.get('onstart')!r} {body.get('env')!r}")
    if not str(body.get("label") or "").startswith(base):
        out.append(f"rent without our label: {body.get('label')!r}")
    return out


def _over_hourly_cap(name: str, times: list[float | None], cap: int) -> list[str]:
    ts = sorted(t for t in times if t is not None)
    for i, t in enumerate(ts):
        n = sum(1 for u in ts[i:] if u < t + 3600)
        if n > cap:
            return [f"{n} {name} within an hour > {cap}"]
    return []


def _fleet_violations(live: list[dict[str, Any]], settings: Any, base: str) -> list[str]:
    p = settings.policy
    ours = [i for i in live if str(i.get("label") or "").startswith(base)]
    out: list[str] = []
    if len(ours) > p.max_instances:
        out.append(f"{len(ours)} live instances > {p.max_instances}")
    if sum(i["dph_total"] for i in ours) > p.max_total_dph + 1e-6:
        out.append(f"fleet at ${sum(i['dph_total'] for i in ours):.3f}/h > {p.max_total_dph}")
    return out


def policy_violations(sim: Simulator, settings: Any, foreign: set[int]) -> list[str]:
    """Everything that reached the simulator outside policy (see PolicySettings / FleetSettings)."""
    p, f = settings.policy, settings.fleet
    base = f"{f.label_prefix}{settings.agent_id}-"
    out: list[str] = []
    with sim._lock:
        reqs = list(sim.requests)
        every = {**sim.destroyed, **sim.instances}
        live = list(sim.instances.values())
    rents, destroys = [], []
    for r in reqs:
        path = r["path"]
        if r["method"] == "PUT" and path.startswith("/api/v0/asks/"):
            oid = int(path.rstrip("/").rsplit("/", 1)[-1])
            rents.append(r["t"])
            body = r["body"] if isinstance(r["body"], dict) else {}
            out += _rent_violations(sim.offers.get(oid) or {}, body, oid, settings, base)
        elif r["method"] == "DELETE" or (r["method"] == "PUT" and path.startswith("/api/v0/instances/")
                                         and "request_logs" not in path):
            iid = int(path.rstrip("/").rsplit("/", 1)[-1])
            label = str((every.get(iid) or {}).get("label") or "")
            if iid in foreign or not label.startswith(base):
                out.append(f"{r['method']} {path} on an instance not ours ({label!r})")
            if r["method"] == "DELETE":
                destroys.append(r["t"])
    out += _fleet_violations(live, settings, base)
    out += _over_hourly_cap("rents", rents, p.max_rents_per_hour)
    out += _over_hourly_cap("destroys", destroys, p.max_destroys_per_hour)
    missing = sorted(foreign - set(sim.instances))
    if missing:
        out.append(f"foreign instances gone: {missing}")
    return out


def run_ambiguous(root: Path, ticks: int, seed: int = 11) -> dict[str, Any]:
    """Ticks where half of all rents create the instance, then answer 500 or hang."""
    from agent.runtime.tick import run_tick

    out: dict[str, Any] = {"ticks": ticks, "failed_ticks": [], "unresolved": []}
    with running_sim(seed=seed, start=DEFAULT_START) as (sim, server):
        # Only a hang may time out: an ordinary answer slower than the client's timeout on a loaded machine
        # would be settled by its label too, and counted as ambiguous when the simulator made it none.
        app = make_app(root, sim, server, vast={"timeout": 1.5})
        try:
            # Listed at once, so each ambiguous rent is resolved by its label within its tick; with vast.ai's
            # listing lag it stays pending and is adopted a tick later (tests/fleet/test_uncertain.py).
            # Instant starts too: demand swings every tick, and each swing up rents while the last ones are gone.
            sim.realism.update({"listing_lag": 0, "quick": 1})
            sim.faults.update({"ambiguous_rent": 0.5, "hang_seconds": 4.0})
            for n in range(ticks):
                sim.faults.update({"ambiguous_rent_mode": "hang" if (n // 2) % 2 else "500"})
                sim.pending = 0.0 if n % 2 else 400.0
                r = run_tick(app)
                if not r.ok:
                    out["failed_ticks"].append(r.reason)
                called = {e.payload["call_id"] for e in app.log.read(0, kinds=["tool.called"], tick=r.tick)}
                results = {e.payload["call_id"] for e in app.log.read(0, kinds=["tool.result"], tick=r.tick)}
                out["unresolved"] += sorted(called - results)
                sim.advance(900.0)
            rents = [r for r in sim.requests if r["method"] == "PUT" and r["path"].startswith("/api/v0/asks/")]
            out["rent_requests"] = len(rents)
            out["rents_creating"] = len([r for r in rents if r["status"] in (200, 500)])
            out["ambiguous_500"] = sim.fault_counts["ambiguous_500"]
            out["ambiguous_hang"] = sim.fault_counts["ambiguous_hang"]
            out["resolved_by_label"] = sum(
                1 for e in app.log.read(0, kinds=["tool.result"])
                if e.payload["name"] == "rent_instance" and "ambiguously" in (e.payload.get("output") or ""))
            out["audit"] = asdict(audit_rentals(sim, db_path(root)))
        finally:
            app.close()
    out["problems"] = check_db(db_path(root))
    return out


def run_api_chaos(root: Path, ticks: int, seed: int = 21) -> dict[str, Any]:
    """Ticks against a simulator failing ~30% of calls (429 text/quota, 500, 503, too slow)."""
    from agent.runtime.tick import run_tick

    out: dict[str, Any] = {"ticks": ticks}
    with running_sim(seed=seed) as (sim, server):
        app = make_app(root, sim, server, vast={"timeout": 0.25, "max_attempts": 2})
        try:
            sim.faults.update(chaos_faults(0.27, slow=0.03, slow_seconds=0.5, ambiguous=0.1))
            oks = []
            for n in range(ticks):
                sim.pending = 0.0 if n % 5 == 4 else 300.0
                oks.append(run_tick(app).ok)  # an exception here fails the run: that is the check
                sim.advance(600.0)
            ends = tick_terminals(app.log)
            failed = list(app.log.read(0, kinds=["tick.failed"]))
            out["ticks_completed"] = sum(oks)
            out["ticks_completed_second_half"] = sum(oks[ticks // 2:])
            out["terminal_events_ok"] = sorted(ends) == list(range(1, ticks + 1)) and \
                all(len(v) == 1 for v in ends.values())
            out["tick_failed"] = len(failed)
            out["tick_failed_without_reason"] = sum(1 for e in failed if not e.payload["reason"])
            out["internal_errors"] = [e.payload["reason"] for e in failed if e.payload["error_kind"] == "internal"]
            tool_errors = [e for e in app.log.read(0, kinds=["tool.result"]) if not e.payload["ok"]]
            out["tool_errors"] = len(tool_errors)
            out["tool_errors_without_text"] = sum(1 for e in tool_errors if not e.payload["error"])
            out["observation_errors"] = sum(len(e.payload["observation"]["errors"])
                                            for e in app.log.read(0, kinds=["tick.started"]))
            out["api_calls"] = sum(1 for r in sim.requests if r["path"].startswith("/api/"))
            out["faults"] = dict(sim.fault_counts)
            out["audit"] = asdict(audit_rentals(sim, db_path(root)))
        finally:
            app.close()
    out["problems"] = check_db(db_path(root))
    return out


# ------------------------------------------------------------------ processes


class ExecSpawner:
    """Runs the real ``fleet-agent`` console script."""

    def __init__(self) -> None:
        exe = shutil.which("fleet-agent") or str(Path(sys.executable).with_name("fleet-agent"))
        self.cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "agent.cli"]
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    def spawn(self, argv: list[str], out: Path, err: Path, env: dict[str, str] | None = None,
              install: str | None = None, call: str | None = None) -> int:
        if install or call:
            raise ValueError("ExecSpawner runs the console script only")
        e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        with open(out, "wb") as o, open(err, "wb") as r:
            p = subprocess.Popen(self.cmd + argv, stdout=o, stderr=r, stdin=subprocess.DEVNULL, env=e,
                                 cwd=str(ROOT))
        self._procs[p.pid] = p
        return p.pid

    def poll(self, pid: int) -> int | None:
        return self._procs[pid].poll()

    def wait(self, pid: int, timeout: float = 120.0) -> int:
        return self._procs.pop(pid).wait(timeout)

    def close(self) -> None:
        for p in self._procs.values():
            p.kill()
            p.wait()
        self._procs.clear()


class Zygote:
    """A pre-imported Python process that forks one child per run (see the module docstring)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.harness", "zygote"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=str(ROOT),
                                     text=True, bufsize=1)
        assert self.proc.stdout is not None
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            raise RuntimeError(f"zygote did not start: {ready!r}")

    def _ask(self, msg: dict[str, Any]) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(msg) + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def spawn(self, argv: list[str], out: Path, err: Path, env: dict[str, str] | None = None,
              install: str | None = None, call: str | None = None) -> int:
        """``install``: "module:function" run in the child first; ``call``: run this instead of the CLI."""
        return int(self._ask({"op": "spawn", "argv": argv, "out": str(out), "err": str(err), "env": env or {},
                              "install": install, "call": call}))

    def poll(self, pid: int) -> int | None:
        """The child's exit code, or None while it runs."""
        got = self._ask({"op": "poll", "pid": pid})
        return None if got == "running" else int(got)

    def wait(self, pid: int, timeout: float = 120.0) -> int:
        return int(self._ask({"op": "wait", "pid": pid}))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _resolve(spec: str) -> Any:
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


def _share_ssl_context() -> None:
    """Build httpx's default SSL context once, here, for every child to inherit.

    Every URL in these runs is http://127.0.0.1, so the context is never used; building it
    (loading the CA bundle) is otherwise the largest cost of a short-lived tick process.
    """
    import httpx._transports.default as transport

    built = transport.create_ssl_context()
    real = transport.create_ssl_context

    def shared(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        return built if (verify is True and cert is None) else real(verify=verify, cert=cert, trust_env=trust_env)

    transport.create_ssl_context = shared  # type: ignore[assignment]


def zygote_main() -> None:  # pragma: no cover - runs in its own process
    import agent.cli
    import agent.runtime.tick  # noqa: F401 - imported once here, inherited by every child
    import tools  # noqa: F401
    from agent.tokens import get_tokenizer

    get_tokenizer("cl100k_base")
    _share_ssl_context()
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    reaped: dict[int, int] = {}
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] in ("wait", "poll"):
            pid = msg["pid"]
            if pid not in reaped:
                done, status = os.waitpid(pid, os.WNOHANG if msg["op"] == "poll" else 0)
                if done:
                    reaped[pid] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            rc = reaped.pop(pid, None) if msg["op"] == "wait" else reaped.get(pid)
            sys.stdout.write(f"{'running' if rc is None else rc}\n")
            sys.stdout.flush()
            continue
        pid = os.fork()
        if pid:
            sys.stdout.write(f"{pid}\n")
            sys.stdout.flush()
            continue
        code = 70
        try:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            out = os.open(msg["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            err = os.open(msg["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(out, 1)
            os.dup2(err, 2)
            sys.stdin = open(os.devnull)  # noqa: SIM115 - the child's whole life
            for k, v in msg["env"].items():
                os.environ[k] = v
            sys.argv = ["fleet-agent", *msg["argv"]]
            if msg.get("install"):
                _resolve(msg["install"])()
            code = _resolve(msg["call"])(msg["argv"]) if msg.get("call") else agent.cli.main(msg["argv"])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 2
        except BaseException:  # noqa: BLE001 - a child must end with an exit code and its traceback on stderr
            import traceback

            traceback.print_exc()
            code = 70
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


MIN_ROUNDS = 5  # rounds an operator worker runs however long they take
LOAD_ALERTS = 600  # alerts raised before the workers start: each round acks one, so a fast machine stops there


def worker_main(argv: list[str]) -> int:  # pragma: no cover - runs in a forked child
    """An operator process: notes, acks and reads through the CLI in a loop.

    argv: [config, results file, worker index, seconds, workers]. Each write is recorded
    as a JSON line (op, text or alert id, exit code) so the test can find it in the log. A worker
    runs for ``seconds`` and at least ``MIN_ROUNDS`` rounds, so a slow machine still exercises it, and
    stops early on a fast one once it has acked its share of the ``LOAD_ALERTS`` alerts raised before it.
    """
    import io

    import agent.cli

    cfg, results, idx, seconds, workers = argv[0], argv[1], int(argv[2]), float(argv[3]), int(argv[4])
    deadline = time.monotonic() + seconds
    n = 0
    with open(results, "w", encoding="utf-8") as out:
        while n < MIN_ROUNDS or (time.monotonic() < deadline and n < LOAD_ALERTS // workers):
            n += 1
            text = f"note w{idx}-{n}"
            rc = _quiet(agent.cli.main, ["--config", cfg, "say", "--by", f"w{idx}", text], io)
            out.write(json.dumps({"op": "note", "text": text, "rc": rc}) + "\n")
            alert = idx + 1 + workers * (n - 1)
            rc = _quiet(agent.cli.main, ["--config", cfg, "alerts", "ack", str(alert), "--by", f"w{idx}",
                                         "--note", f"ack w{idx}-{n}"], io)
            out.write(json.dumps({"op": "ack", "alert": alert, "rc": rc}) + "\n")
            for read in (["thread", "show", "--limit", "5"], ["alerts", "list"], ["status", "--json"]):
                rc = _quiet(agent.cli.main, ["--config", cfg, *read], io)
                out.write(json.dumps({"op": "read", "argv": read, "rc": rc}) + "\n")
            out.flush()
    return 0


def _quiet(main: Any, argv: list[str], io: Any) -> int:
    """Run the CLI with stdout discarded (stderr stays: errors must be seen)."""
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            return int(main(argv))
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else 2


# ------------------------------------------------------------------ checking a database


def _open(path: Any) -> Any:
    from agent.store.log import EventLog

    return EventLog(path)


class ChainWatch:
    """Every (seq, hash) pair ever read from a log; ``check`` re-reads and compares them all."""

    def __init__(self) -> None:
        self.pairs: dict[int, str] = {}
        self.checked = 0

    def check(self, path: Path) -> list[str]:
        problems = []
        with _open(path) as log:
            now = log.store.event_hashes()
        for seq, h in self.pairs.items():
            self.checked += 1
            if now.get(seq) != h:
                problems.append(f"seq {seq}: was {h[:12]}, now {str(now.get(seq))[:12]} (committed event lost)")
        self.pairs.update(now)
        return problems


def check_db(path: Any, *, rebuild: bool = True) -> list[str]:
    """Integrity, hash chain (which also catches seq gaps) and read models rebuilt from the log."""
    if not log_exists(path):
        return []
    problems = []
    with _open(path) as log:
        ic = log.store.integrity_check()
        if ic != ["ok"]:
            problems.append(f"integrity_check: {ic[:3]}")
        v = log.verify()
        if not v.ok:
            problems.append(f"verify: {v.reason}")
        seqs = list(log.store.event_hashes())
        if seqs != list(range(1, len(seqs) + 1)):
            problems.append("seq gap")
        if rebuild:
            problems += [f"rebuild: {d}" for d in log.rebuild_check()]
    return problems


@dataclass
class RentalAudit:
    created: int = 0  # instances the simulator ever created with our label
    duplicates: int = 0  # instances beyond the first for one idempotency key
    untraced: int = 0  # instances whose key no tool.called carries
    untracked: int = 0  # live instances with our label not active in the instances table
    dangling_intents: int = 0  # tool.called with a side effect and no tool.result
    calls_without_result: int = 0  # any tool.called without a tool.result


def audit_rentals(sim: Simulator, path: Path, label_base: str = LABEL_BASE) -> RentalAudit:
    a = RentalAudit()
    with sim._lock:
        every = list(sim.instances.values()) + list(sim.destroyed.values())
        live = {i["id"]: i for i in sim.instances.values()}
    ours = [i for i in every if (i.get("label") or "").startswith(label_base)]
    a.created = len(ours)
    with _open(path) as log:
        calls = list(log.read(0, kinds=["tool.called"]))
        keys = {k for e in calls
                if e.payload.get("name") == "rent_instance" and (k := e.payload.get("idempotency_key"))}
        active = set(log.store.owned_instance_ids())
        a.dangling_intents = len(log.store.dangling_intents())
        called = {e.payload.get("call_id") for e in calls}
        results = {e.payload.get("call_id") for e in log.read(0, kinds=["tool.result"])}
    a.calls_without_result = len(called - results)
    by_key: dict[str, int] = {}
    for i in ours:
        k = i["label"][len(label_base):].removesuffix(DRAINING)  # a retiring instance keeps its key, relabelled
        by_key[k] = by_key.get(k, 0) + 1
        if k not in keys:
            a.untraced += 1
    a.duplicates = sum(n - 1 for n in by_key.values() if n > 1)
    a.untracked = sum(1 for iid, i in live.items()
                      if (i.get("label") or "").startswith(label_base) and iid not in active)
    return a


class CapMonitor:
    """Polls the simulator's own state every ``every`` seconds (a thread): counts the moments when
    our live instances (label ours, not exited or offline, as policy counts them) exceed
    ``max_instances`` or their $/h exceeds ``max_total_dph``, and how long the longest such
    episode lasted in wall seconds."""

    def __init__(self, sim: Simulator, max_instances: int, max_total_dph: float, every: float = 0.5) -> None:
        import threading

        self.sim, self.max_instances, self.max_total_dph, self.every = sim, max_instances, max_total_dph, every
        self.polls = self.over_instances = self.over_dph = 0
        self.worst: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cap-monitor", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            with self.sim._lock:
                live = [i for i in self.sim.instances.values() if str(i.get("label") or "").startswith(LABEL_BASE)
                        and i.get("actual_status") not in ("exited", "offline")]
            self.polls += 1
            n, dph = len(live), sum(float(i.get("dph_total") or 0) for i in live)
            if n > self.max_instances:
                self.over_instances += 1
            if dph > self.max_total_dph + 1e-6:
                self.over_dph += 1
            if (n > self.max_instances or dph > self.max_total_dph + 1e-6) and len(self.worst) < 10:
                self.worst.append(f"{n} live, ${dph:.2f}/h")

    def __enter__(self) -> CapMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def figures(self) -> dict[str, Any]:
        return {"polls": self.polls, "over_max_instances": self.over_instances, "over_max_total_dph": self.over_dph,
                "examples": self.worst}


def _request_target(r: dict[str, Any]) -> tuple[str, str] | None:
    """(tool, target) a side-effecting request serves: rent by label, destroy/reboot/modify by id."""
    path = r["path"]
    if r["method"] == "PUT" and path.startswith("/api/v0/asks/"):
        return "rent_instance", str((r["body"] or {}).get("label") if isinstance(r["body"], dict) else "")
    if r["method"] == "DELETE" and path.startswith("/api/v0/instances/"):
        return "destroy_instance", path.rstrip("/").rsplit("/", 1)[-1]
    if r["method"] == "PUT" and path.startswith("/api/v0/instances/reboot/"):
        return "reboot_instance", path.rstrip("/").rsplit("/", 1)[-1]
    if r["method"] == "PUT" and path.startswith("/api/v0/instances/") and "request_logs" not in path:
        return "modify_instance", path.rstrip("/").rsplit("/", 1)[-1]
    return None


def audit_intents(sim: Simulator, path: Path, label_base: str = LABEL_BASE) -> dict[str, Any]:
    """Requests per intent and the log's story of each instance.

    ``duplicate_requests``: requests beyond one per logged intent, per tool and target (a rent's
    target is its label, so any second rent request for one intent counts). A destroy that
    reconcile completes after a restart may re-send a DELETE for an intent whose first request
    was lost or late; those are counted apart as ``destroy_resends`` (destroy is idempotent:
    404 means done). ``adopted_after_destroyed``: instance.adopted for an instance the log had
    already recorded as destroyed or gone."""
    with sim._lock:
        reqs = list(sim.requests)
    sent: dict[tuple[str, str], int] = {}
    for r in reqs:
        t = _request_target(r)
        if t is not None:
            sent[t] = sent.get(t, 0) + 1
    intents: dict[tuple[str, str], int] = {}
    adopted_after = 0
    ended: set[int] = set()
    with _open(path) as log:
        for e in log.read(0, kinds=["tool.called", "tool.result", "instance.adopted", "instance.gone"]):
            p = e.payload
            if e.kind == "tool.called" and p.get("side_effect"):
                try:
                    args = json.loads(p.get("arguments") or "{}")
                except ValueError:
                    args = {}
                target = (f"{label_base}{p.get('idempotency_key')}" if p["name"] == "rent_instance"
                          else str(args.get("instance_id")))
                intents[(p["name"], target)] = intents.get((p["name"], target), 0) + 1
            elif e.kind == "tool.result" and (p.get("effect") or {}).get("type") == "destroyed":
                ended.add(int(p["effect"]["instance_id"]))
            elif e.kind == "instance.gone":
                ended.add(int(p["instance_id"]))
            elif e.kind == "instance.adopted" and int(p["instance_id"]) in ended:
                adopted_after += 1
    dup: dict[str, int] = {}
    resends = 0
    for (tool, target), n in sent.items():
        extra = n - max(1, intents.get((tool, target), 0))
        if extra <= 0 or (tool == "destroy_instance" and target not in {t for (_, t) in intents}):
            continue  # a destroy of an orphan by reconcile has no intent of its own
        if tool == "destroy_instance":
            resends += extra
        else:
            dup[tool] = dup.get(tool, 0) + extra
    return {"side_effect_requests": sum(sent.values()), "intents": sum(intents.values()),
            "duplicate_requests": sum(dup.values()), "duplicates_by_tool": dup, "destroy_resends": resends,
            "adopted_after_destroyed": adopted_after}


def install_reboots() -> None:
    """The rules provider, plus one reboot of a running instance of ours per tick: so the kill
    loop also lands between a reboot's intent and its result."""
    from agent.model import rules

    first = rules._first_step

    def with_reboot(plan: Any) -> Any:
        calls, text = first(plan)
        running = [i for i in plan.live if i.get("status") == "running"]
        if running:
            calls.append(("reboot_instance", {"instance_id": running[-1]["id"], "reason": "reliability run"}))
        return calls, text

    rules._first_step = with_reboot  # type: ignore[assignment]


def install_lag_destroys() -> None:
    """``install_reboots``, plus a destroy, each tick, of the newest instance of ours vast.ai does not list
    yet (rented within its listing lag): so the fault proxy's lost destroy answers land inside the lag.
    A tick with none destroys its newest running instance instead, so the fleet keeps renting (churn)."""
    from agent.model import rules

    install_reboots()
    first = rules._first_step

    def with_lag_destroy(plan: Any) -> Any:
        calls, text = first(plan)
        unlisted = sorted(i["id"] for i in plan.live if i.get("status") == "unlisted")
        doomed = {a.get("instance_id") for n, a in calls if n == "destroy_instance"}
        running = sorted(i["id"] for i in plan.live if i.get("status") == "running")
        if unlisted and unlisted[-1] not in doomed:
            calls.insert(0, ("destroy_instance", {"instance_id": unlisted[-1], "reason": "reliability run: "
                                                  "destroyed within its listing lag"}))
        elif not unlisted and running and running[-1] not in doomed:
            calls.insert(0, ("destroy_instance", {"instance_id": running[-1], "reason": "reliability run: churn"}))
        return calls, text

    rules._first_step = with_lag_destroy  # type: ignore[assignment]


def destroyed_but_alive(sim: Simulator, path: Any) -> set[int]:
    """Instances the log calls destroyed (a destroy's result, or instance.gone) that the simulator still
    has (live, in any state): the log's story against vast.ai's own state."""
    ended: set[int] = set()
    with _open(path) as log:
        for e in log.read(0, kinds=["tool.result", "instance.gone"]):
            p = e.payload
            if e.kind == "instance.gone":
                ended.add(int(p["instance_id"]))
            elif (p.get("effect") or {}).get("type") == "destroyed":
                ended.add(int(p["effect"]["instance_id"]))
    with sim._lock:
        return ended & set(sim.instances)


OPS_ALERTS = 1000  # alerts raised before a kill loop with operators: each run acks the next one


def operator_main(argv: list[str]) -> int:  # pragma: no cover - runs in a forked child
    """One operator turn beside a tick: a note and an ack through the CLI. argv: [config, results, text, alert]."""
    import io

    import agent.cli

    cfg, results, text, alert = argv
    with open(results, "a", encoding="utf-8") as out:
        rc = _quiet(agent.cli.main, ["--config", cfg, "say", "--by", "ops", text], io)
        out.write(json.dumps({"op": "note", "text": text, "rc": rc}) + "\n")
        if int(alert) > 0:
            rc = _quiet(agent.cli.main, ["--config", cfg, "alerts", "ack", alert, "--by", "ops",
                                         "--note", f"ack {alert}"], io)
            out.write(json.dumps({"op": "ack", "alert": int(alert), "rc": rc}) + "\n")
    return 0


def lost_operator_writes(path: Any, results: Path) -> dict[str, int]:
    """Notes and acks whose command exited 0, against the log: how many are missing or there twice."""
    recs = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    with _open(path) as log:
        notes = [e.payload["text"] for e in log.read(0, kinds=["operator.note"])]
        acks = [int(e.payload["alert_id"]) for e in log.read(0, kinds=["alert.acked"])]
    wrote_n = [r["text"] for r in recs if r["op"] == "note" and r["rc"] == 0]
    wrote_a = [r["alert"] for r in recs if r["op"] == "ack" and r["rc"] == 0]
    return {"notes": len(wrote_n), "acks": len(wrote_a),
            "failed_commands": sum(1 for r in recs if r["rc"] != 0),
            "lost_notes": sum(1 for t in wrote_n if t not in notes),
            "lost_acks": sum(1 for a in wrote_a if a not in acks),
            "notes_twice": sum(1 for t in wrote_n if notes.count(t) > 1),
            "acks_twice": sum(1 for a in wrote_a if acks.count(a) > 1)}


def plant_absence_as_gone() -> None:
    """A deliberately broken variant: an instance a listing lacks is taken as gone at once, even inside the
    listing lag of its rent (the defect of issue 42), so ``destroyed_but_alive`` must find it."""
    import agent.fleet.reconcile as reconcile_mod
    import tools.fleet as fleet_tools

    install_lag_destroys()

    def gone(*_a: Any, **_k: Any) -> bool:
        return True

    reconcile_mod.absence_proves_gone = gone  # type: ignore[assignment]
    fleet_tools.absence_proves_gone = gone  # type: ignore[assignment]


def run_lag_destroys(root: Path, *, rounds: int, spawner: Any, install: str = "tests.reliability.harness:"
                     "install_lag_destroys", seed: int = 4) -> dict[str, Any]:
    """Ticks in pairs without kills or other faults: one well past the listing lag (the provider churns one
    instance and rents its replacement), one a few simulated seconds later (the replacement is unlisted;
    the provider destroys it and the fault proxy loses every such answer, before vast.ai acts). Returns the
    figures: lag faults by kind, destroyed-but-alive ids, the monitor's over-cap polls, the audits."""
    out: dict[str, Any] = {}
    with running_sim(seed) as (sim, server):
        cfg = write_config(root, server.url, policy={"max_instances": 2, "max_total_dph": 8.0},
                           vast={"settle_after": 600.0})
        sim.lag_destroy_rate, sim.lag_destroy_modes = 1.0, ("fail",)
        sim.realism.update({"quick": 1})  # the listing lag is what runs here: instant starts keep the churn going
        sim.pending = 600.0
        alive: set[int] = set()
        codes: list[int] = []
        with CapMonitor(sim, 2, 8.0, every=0.05) as monitor:
            for n in range(2 * rounds):
                sim.advance(2.0 if n % 2 else 300.0)
                sim.pending = 600.0  # a backlog the fleet never clears: the provider keeps renting what it churns
                pid = spawner.spawn(["--config", str(cfg), "tick"], root / "out.txt", root / "err.txt",
                                    install=install)
                codes.append(spawner.wait(pid))
                alive |= destroyed_but_alive(sim, db_path(root))
                if codes[-1] not in (0, 1):
                    out.setdefault("errors", []).append((root / "err.txt").read_text()[-400:])
        out.update(exit_codes=codes, faults=dict(sim.fault_counts), lag_deletes=sim.lag_deletes,
                   destroyed_but_alive=sorted(alive), monitor=monitor.figures(),
                   audit=asdict(audit_rentals(sim, db_path(root))), problems=check_db(db_path(root)))
    return out


# ------------------------------------------------------------------ the kill -9 loop


@dataclass
class KillReport:
    runs: int = 0
    kills: int = 0
    kills_after_mutation: int = 0
    completed_runs: int = 0
    events_checked: int = 0  # (seq, hash) comparisons after restarts
    events: int = 0
    db_checks: int = 0
    problems: list[str] = field(default_factory=list)
    audit: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)
    rent_requests: int = 0
    api_requests: int = 0
    final_tick_rc: int | None = None
    kills_after_by_tool: dict[str, int] = field(default_factory=dict)
    monitor: dict[str, Any] = field(default_factory=dict)
    intents: dict[str, Any] = field(default_factory=dict)
    destroyed_but_alive: list[int] = field(default_factory=list)  # ids, seen after any run or at the end
    lag_destroys: int = 0  # DELETE requests that reached the simulator inside the instance's listing lag
    operators: dict[str, int] = field(default_factory=dict)


def _break_one(sim: Simulator, rng: random.Random) -> None:
    """vast.ai reclaims one of our machines (the instance vanishes): the fleet must replace it."""
    with sim._lock:
        ours = sorted(i for i, x in sim.instances.items() if str(x.get("label") or "").startswith(LABEL_BASE))
        if ours and rng.random() < 0.7:
            sim._destroy(rng.choice(ours), sim.now())


def _new_mutation(sim: Simulator, start: int) -> str | None:
    """The tool of the first fleet-changing request since ``start``, if any."""
    for r in list(sim.requests[start:]):
        if mutating(r):
            t = _request_target(r)
            return t[0] if t else "other"
    return None


def _strike(use: Any, pid: int, sim: Simulator, start: int, rng: random.Random, mode: float, t0: float,
            typical: float) -> tuple[bool, str | None]:
    """SIGKILL one run: (killed, the tool of the fleet-changing request it followed, if aimed at one).

    Half the kills strike at a random moment; the other half within a few ms of a fleet-changing request
    reaching the simulator (the window between an intent, the call and its result), or late in the tick
    when none comes."""
    targeted = mode < 0.45
    deadline = t0 + (typical * 2.0 if targeted else rng.uniform(0.0, typical * 1.2))
    after_mut = None
    while time.monotonic() < deadline:
        if targeted and (after_mut := _new_mutation(sim, start)):
            time.sleep(rng.uniform(0.0, 0.01))
            break
        if use.poll(pid) is not None:
            return False, None
        time.sleep(0.002)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)  # the pid is ours until waited for
        return True, after_mut
    return False, after_mut


def run_kill9(root: Path, *, kills: int, seed: int = 1, spawner: Any = None, install: str | None = None,
              fault_rate: float = 0.2, ambiguous: float = 0.15, exec_every: int = 0,
              max_runs: int | None = None, after_action: float = 0.0, lag_destroy: float = 0.0,
              max_instances: int = 10, operators: bool = False) -> KillReport:
    """SIGKILL ``fleet-agent tick`` at random moments against a faulty simulator, ``kills`` times.

    After every run: no committed (seq, hash) changed or vanished, integrity_check ok, the
    chain verifies, read models rebuild equal. At the end one clean tick reconciles and the
    simulator's instances are audited against the log. ``install`` plants code in each child
    (a deliberately broken variant); ``exec_every`` makes every n-th run the real console
    script rather than a forked child.

    ``lag_destroy``: the share of destroys sent inside the listing lag whose answer the fault proxy
    loses (``CountingSim.lag_destroy_rate``); with it half of the runs move the simulator's clock by
    seconds only, so instances rented a run before are still unlisted. ``max_instances``: the policy cap
    the monitor holds the simulator's state to. ``operators``: a note and an ack through the CLI
    beside every tick; at the end each one that exited 0 must be in the log exactly once. After every run
    the simulator is searched for instances the log calls destroyed (``destroyed_but_alive``).
    """
    rng = random.Random(seed)
    rep = KillReport()
    watch = ChainWatch()
    own = spawner is None
    spawner = spawner or Zygote()
    execer = ExecSpawner() if exec_every else None
    try:
        with running_sim(seed) as (sim, server):
            cap_dph = 4.0 * max_instances
            cfg = write_config(root, server.url, policy={"max_instances": max_instances, "max_total_dph": cap_dph},
                               vast={"settle_after": 120.0})
            sim.faults.update(chaos_faults(fault_rate, ambiguous=ambiguous, hang_seconds=0.8))
            sim.faults.update({"rate_after_action": after_action, "late_seconds": 0.8})
            sim.lag_destroy_rate = lag_destroy
            ops_file = root / "operators.jsonl"
            if operators:
                from agent import feedback

                with _open(db_path(root)) as log:
                    for a in range(OPS_ALERTS):
                        feedback.raise_alert(log, key=f"ops:{a}", severity="info", title=f"operator alert {a}")
            alive: set[int] = set()
            monitor = CapMonitor(sim, max_instances, cap_dph).__enter__()
            durations: list[float] = []
            budget = max_runs or kills * 4
            while rep.kills < kills and rep.runs < budget:
                n = rep.runs
                sim.faults.update({"ambiguous_rent_mode": "hang" if n % 3 == 2 else "500"})
                sim.pending = 0.0 if n % 4 == 3 else max(sim.pending, 600.0)
                in_lag = lag_destroy > 0 and rng.random() < 0.5  # what a run before rented stays unlisted
                sim.advance(rng.uniform(1.0, 8.0) if in_lag else rng.choice([120.0, 300.0, 900.0]))
                if not in_lag:
                    _break_one(sim, rng)
                use = execer if execer and n % exec_every == exec_every - 1 else spawner
                start = len(sim.requests)
                t0 = time.monotonic()
                pid = use.spawn(["--config", str(cfg), "tick"], root / "out.txt", root / "err.txt",
                                install=install if use is spawner else None)
                op = None
                if operators:
                    op = spawner.spawn([str(cfg), str(ops_file), f"ops note {n}", str(n + 1 if n < OPS_ALERTS else 0)],
                                       root / "op.out", root / "op.err", call="tests.reliability.harness:operator_main")
                mode = rng.random()
                typical = sorted(durations)[len(durations) * 4 // 5] if durations else 1.0
                if use is execer:
                    typical += 1.5
                killed, after_mut = _strike(use, pid, sim, start, rng, mode, t0, typical) if mode < 0.85 \
                    else (False, None)
                rc = use.wait(pid)
                elapsed = time.monotonic() - t0
                if op is not None and spawner.wait(op) != 0:
                    rep.problems.append(f"run {n}: operator exit: {(root / 'op.err').read_text()[-400:]}")
                rep.runs += 1
                if rc == -signal.SIGKILL and killed:
                    rep.kills += 1
                    rep.kills_after_mutation += int(after_mut is not None)
                    if after_mut:
                        rep.kills_after_by_tool[after_mut] = rep.kills_after_by_tool.get(after_mut, 0) + 1
                else:
                    rep.completed_runs += 1
                    durations.append(elapsed)
                    if rc not in (0, 1):
                        rep.problems.append(f"run {n}: exit {rc}: {(root / 'err.txt').read_text()[-400:]}")
                if log_exists(db_path(root)):
                    # After every restart: nothing lost, integrity, chain; read models every 10th run
                    # (a full rebuild per kill would make the loop quadratic) and at the end.
                    found = watch.check(db_path(root)) + check_db(db_path(root), rebuild=n % 10 == 9)
                    rep.problems += [f"run {n}: {p}" for p in found]
                    rep.db_checks += 1
                    alive |= destroyed_but_alive(sim, db_path(root))
            sim.quiet()
            # A request the last killed run sent "late" reaches the simulator late_seconds after it was sent,
            # whoever still waits: let it land before the clock moves past the listing lag, so the final
            # tick lists what it created (otherwise that rent is rightly still pending, adopted a tick later).
            # The sleep lets a request still in transit from the killed run arrive; then wait for every late
            # delivery to have acted, however long a loaded machine takes to run the server's threads.
            time.sleep(sim.faults.late_seconds + 0.5)
            sim.wait_late_landed()
            sim.advance(60.0)
            pid = spawner.spawn(["--config", str(cfg), "tick"], root / "out.txt", root / "err.txt", install=install)
            rep.final_tick_rc = spawner.wait(pid)
            monitor.__exit__()
            rep.monitor = monitor.figures()
            rep.intents = audit_intents(sim, db_path(root))
            alive |= destroyed_but_alive(sim, db_path(root))
            rep.destroyed_but_alive = sorted(alive)
            rep.lag_destroys = sim.lag_deletes
            if operators:
                rep.operators = lost_operator_writes(db_path(root), ops_file)
            rep.problems += [f"final: {p}" for p in watch.check(db_path(root)) + check_db(db_path(root))]
            rep.events_checked = watch.checked
            rep.events = len(watch.pairs)
            rep.audit = asdict(audit_rentals(sim, db_path(root)))
            rep.faults = dict(sim.fault_counts)
            rep.api_requests = sum(1 for r in list(sim.requests) if r["path"].startswith("/api/"))
            rep.rent_requests = sum(1 for r in list(sim.requests)
                                    if r["method"] == "PUT" and r["path"].startswith("/api/v0/asks/"))
    finally:
        if own:
            spawner.close()
        if execer:
            execer.close()
    return rep


if __name__ == "__main__":  # pragma: no cover
    if sys.argv[1:] == ["zygote"]:
        zygote_main()
