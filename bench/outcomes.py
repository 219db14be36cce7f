"""Outcomes: how well a decider runs the fleet, scenario by scenario, against a cron-style autoscaler.

Each scenario runs twice, each time against its own `fleet-agent sim --manual-clock` subprocess on
127.0.0.1 (same seed, same script): once with the agent (the real tick, `agent.runtime.tick.run_tick`,
with a config pointing at the simulator, exactly what `fleet-agent tick` runs), once with the reference
arm, bench/cron_arm.py, under the same caps and on the same market (the cron arm's disk, every GPU model, its
reliability floor: the arms differ in how they decide, not in what they may rent). Every tick is 5 simulated minutes: the scenario's events
for that tick (sent over the simulator's /_sim/ endpoints), one decision, then POST /_sim/advance.
Operator notes go in through `agent.feedback.say`, what `fleet-agent say` runs, stamped with the
simulated clock. Every figure comes from the simulator's ground truth (GET /_sim/accounting), never
from the agent's log; only the alerts are read from the agent's log, since raising them is its job.

Per scenario and arm:
    wait     mean job wait, minutes: job-hours waited / jobs arrived
    unmet    unmet job-ticks: per tick, the jobs waiting beyond what the running fleet finishes in a tick
             (the simulator counts them at each /_sim/advance)
    spend    $ billed by the simulator
    $/job    spend / jobs served
    over     instance-ticks over need: per tick, live instances the fleet could lose (slowest first) and
             still do the arrivals plus the backlog within an hour
    rent     rents' $ per job-capacity ($/h and the traffic the host bills for what an instance moves on
             average, over jobs/h) over the best on offer when they were made (among the
             offers the agent may rent: up to policy.max_dph_per_instance $2.50/h however many GPUs, the
             reliability floor, the disk; not on the simulator's failing hosts, whose offers deliver no
             jobs), averaged over the rents from the scenario's first event on (1.00 = always the best; '-': no
             rents)
    react    ticks from the scenario's event until the fleet answers it (1 = by the first tick after);
             '-' when it never does within the run
    viol     directive violations: rents after the operator's note that break it (host or GPU model); the
             cron arm's operator edits the script to obey the same order (bench/cron_arm.py, obey)
    alerts   expected alerts the agent raised within ALERT_WITHIN (1) tick of their cause (a failure between
             ticks, instance:underperforming:, within 3: it shows only over several ticks), out of those expected
             (--json adds each one's lag in ticks; 0 = raised by the tick the cause came before). A scenario
             names the alerts its events cause (a key, or key!severity for the severity it must reach, such as
             balance:low!critical when the credit hits $0; a per-instance key such as dead: counts once raised
             for every instance the event hit, and is not expected when it hit none of the arm's); demand:unmet is expected in every scenario, once for each
             spell the simulator shows demand unmet (a job or more waiting beyond what the fleet finishes in
             a tick, the backlog not shrinking) for UNMET_AFTER (3, the agent's alerts.unmet_after) ticks
             running, caused at the tick after the third
A ratio is the agent's figure over the cron arm's in the same run.

    python bench/outcomes.py [--decider rules | --model-url URL --model NAME] [--scenarios a,b]
                             [--ticks N] [--seed S] [--json] [--list]
                             [--model-timeout S] [--text-tool-calls accept|reject] [--progress] [--keep DIR]
                             [--model-from-tick N] [--budget-tokens N]

A real model on a CPU is slow: --model-timeout gives each request its time (the first one of a fleet can take
minutes), --progress prints a line per tick with its wall time to stderr, and --keep DIR keeps each arm's
directory (the agent's config, data dir and log; the simulator's final accounting and the arm's result) as
DIR/<scenario>-<arm>/. The summary gives every arm's wall time per decision (mean/max).

--model-from-tick N lets the rules provider run ticks 1..N-1 and the model take over the running fleet at tick N
(the config is rewritten for the model and the same log opened again: its rolling thread holds the rules' ticks).
A scenario's event can then be probed with a few model ticks right after it. The figures still cover every tick:
the table ends with which ticks the model decided, and each result carries it (decided_by).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agent.sim.instances import true_per_job  # noqa: E402
from agent.sim.market import MODEL_BY_NAME  # noqa: E402
from bench.cron_arm import MIN_RELIABILITY, Caps, CronArm  # noqa: E402

TICK_S = 300.0
UNMET_KEY = "demand:unmet"
UNMET_AFTER = 3  # the agent's alerts.unmet_after (its default, which the benchmark's config keeps)
ALERT_WITHIN = 1  # ticks after its cause an expected alert counts as raised in time
# ...but a failure between ticks: no single tick sees it, the agent reads it from 3 observations (its window), and
# the aim for it is "a flap between ticks caught within 3 ticks"
ALERT_WITHIN_BY_KEY = {"instance:underperforming:": 3}
SEVERITY_SEP = "!"  # an expected key "balance:low!critical": that alert at that severity
SIM_KEY = "outcomes-sim-key"
CAPS = Caps(max_instances=12, max_total_dph=8.0, max_rents_per_hour=8)
LIVE = ("running", "loading", "created", None)
NOTE = "Stop using host {host}. Only RTX 4090 from now on."


class Sim:
    """`fleet-agent sim --manual-clock` as a subprocess, and its admin endpoints."""

    def __init__(self, seed: int) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "sim", "--manual-clock", "--port", str(port), "--seed", str(seed),
             "--api-key", SIM_KEY, "--rate-interval", "0", "--logs-delay", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if "listening on" not in line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise RuntimeError(f"the simulator did not start: {line}{err}")
        self.url = line.rsplit(" ", 1)[-1].strip()
        self.http = httpx.Client(base_url=self.url, timeout=30.0)

    def get(self, path: str) -> Any:
        r = self.http.get(path)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: dict[str, Any]) -> Any:
        r = self.http.post(path, json=body)
        if r.status_code >= 400:
            raise RuntimeError(f"POST {path} {body}: HTTP {r.status_code} {r.text}")
        return r.json()

    def now(self) -> float:
        return float(self.get("/_sim/accounting")["now"])

    def close(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ------------------------------------------------------------------ scenarios


@dataclass
class Run:
    """What a scenario's script may touch: the simulator, the arm's operator channel, its notes."""

    sim: Sim
    say: Callable[[str, bool], None]
    notes: dict[str, Any] = field(default_factory=dict)  # what the script remembers (hosts, instances)

    def live(self) -> list[dict[str, Any]]:
        return [i for i in self.sim.get("/_sim/accounting")["instances"] if i["status"] in LIVE]


def constant(rate: float) -> Callable[[Run], None]:
    def setup(r: Run) -> None:
        r.sim.post("/_sim/arrivals", {"shape": "constant", "rate": rate})
    return setup


def cheap_host(r: Run, gpu: str = "RTX 3090", n: int = 2) -> None:
    """List n cheap offers on the most reliable good host, so both arms rent there first."""
    st = r.sim.get("/_sim/state")
    bad = {int(h) for h in st["bad_hosts"]}
    host = _good_host(r, bad)
    added = r.sim.post("/_sim/offers", {"add": [{"gpu_name": gpu, "dph": 0.12, "host_id": host}] * n})["added"]
    r.notes.update(host=host, cheap_offers=added)


def _good_host(r: Run, bad: set[int]) -> int:
    offers = r.sim.http.post("/api/v0/bundles/", json={"order": [["id", "asc"]], "limit": 1000},
                             headers={"Authorization": f"Bearer {SIM_KEY}"}).json()["offers"]
    return int(max((o["reliability2"], -o["host_id"]) for o in offers if o["host_id"] not in bad)[1]) * -1


def outage(r: Run) -> None:
    host = r.notes["host"]
    r.notes["victims"] = [i["id"] for i in r.live() if i["host_id"] == host]
    r.sim.post("/_sim/host", {"host_id": host, "online": False})


def flap(r: Run) -> None:
    running = [i for i in r.live() if i["status"] == "running"]
    if running:
        victim = max(running, key=lambda i: (i["jobs_per_h"], i["id"]))
        r.notes["victims"] = [victim["id"]]
        r.sim.post("/_sim/flap", {"instance_id": victim["id"], "down_s": 180, "every_s": 300, "phase_s": 60})


def surge(r: Run) -> None:
    r.sim.post("/_sim/prices", {"gpu_name": "RTX 3090", "multiplier": 2.5})
    r.sim.post("/_sim/arrivals", {"shape": "constant", "rate": 45})


def mass_stop(r: Run) -> None:
    """Every live instance stops at once without its owner asking (POST /_sim/stop): the fleet's instances are
    on-demand, which vast.ai never outbids, so a mass stop short of a credit run-out is the hosts' side."""
    ids = [i["id"] for i in r.live()]
    r.notes["victims"] = ids
    if ids:
        r.sim.post("/_sim/stop", {"instance_ids": ids})


def note(pin: bool) -> Callable[[Run], None]:
    def event(r: Run) -> None:
        r.say(NOTE.format(host=r.notes["host"]), pin)
    return event


def plenty_4090(r: Run) -> None:
    cheap_host(r)
    r.sim.post("/_sim/offers", {"add": [{"gpu_name": "RTX 4090"}] * 6})


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    setup: Callable[[Run], None]
    events: dict[int, Callable[[Run], None]]
    event_tick: int  # where "ticks to react" counts from
    react: str  # capacity | destroyed | comply
    alerts: dict[str, int] = field(default_factory=dict)  # expected alert key (prefix) -> the tick of its cause;
    # "key!severity": the alert at that severity (one that changes in place, like balance:low at $0)
    # demand:unmet is expected in every scenario, wherever the simulator shows demand unmet (UNMET_AFTER)
    directive: bool = False


def _both(*fs: Callable[[Run], None]) -> Callable[[Run], None]:
    def run(r: Run) -> None:
        for f in fs:
            f(r)
    return run


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("ramp", "demand ramps 10 -> 60 jobs/h over an hour, holds, falls back",
             lambda r: r.sim.post("/_sim/arrivals", {"shape": "ramp", "points": [
                 [600, 10], [4200, 60], [6600, 60], [8400, 10]]}),
             {}, 2, "capacity"),
    Scenario("bursts", "a 3-hour day cycle around 25 jobs/h with two bursts (x3, x4)",
             lambda r: r.sim.post("/_sim/arrivals", {"shape": "day", "rate": 25, "amplitude": 0.4,
                                                     "period_s": 10800, "bursts": [
                                                         {"at_s": 3600, "for_s": 1200, "x": 3},
                                                         {"at_s": 7800, "for_s": 900, "x": 4}]}),
             {}, 12, "capacity"),
    Scenario("outage", "the host of two of the fleet's instances goes offline",
             _both(constant(30), cheap_host), {12: outage}, 12, "capacity", {"dead:": 12}),
    Scenario("flap", "the fleet's fastest instance is down 3 of every 5 minutes, up whenever a tick looks",
             constant(30), {8: flap}, 8, "destroyed", {"instance:underperforming:": 8}),
    Scenario("surge", "RTX 3090 prices x2.5 and demand 30 -> 45 jobs/h", constant(30), {10: surge}, 10,
             "capacity"),
    Scenario("thin", "every offer leaves the market for an hour, then returns", constant(30),
             {6: lambda r: r.sim.post("/_sim/offers", {"withdraw": "all"}),
              18: lambda r: r.sim.post("/_sim/offers", {"restore": "all"})}, 18, "capacity"),
    Scenario("credit", "credit falls to $20, hits 0 (instances stop), then a $300 top-up", constant(30),
             {6: lambda r: r.sim.post("/_sim/credit", {"balance": 20}),
              12: lambda r: r.sim.post("/_sim/credit", {"balance": 0}),
              18: lambda r: r.sim.post("/_sim/credit", {"top_up": 300})}, 18, "capacity",
             {"balance:low": 6, "balance:low!critical": 12, "credit:stopped": 12}),
    Scenario("massstop", "every instance of the fleet stops at once on its hosts' side", constant(30),
             {12: mass_stop}, 12, "capacity", {"dead:": 12}),
    Scenario("note", f"operator note mid-run: '{NOTE}'", _both(constant(30), plenty_4090), {10: note(False)}, 10,
             "comply", directive=True),
    Scenario("directive", "the same, as a pinned directive", _both(constant(30), plenty_4090), {10: note(True)}, 10,
             "comply", directive=True),
)}


from bench import outcomes_market  # noqa: E402  (the market's scenarios, kept in their own file)

SCENARIOS.update(outcomes_market.scenarios(Scenario, constant))


# ------------------------------------------------------------------ arms


CRON_DISK_GB = CronArm.disk
MAX_STEPS = 8  # the agent's schedule.max_steps (its default, which the config keeps)


@dataclass(frozen=True)
class Options:
    """How a run is made and watched, beyond the scenario and the decider."""

    model_timeout: float = 600.0  # seconds per model request (model.timeout)
    text_tool_calls: str = "reject"  # the model arm's model.text_tool_calls
    progress: bool = False  # a line per tick, with its wall time, to stderr
    keep: Path | None = None  # keep each arm's directory as keep/<scenario>-<arm>/
    model_from_tick: int = 1  # the model arm: the rules provider decides the ticks before this one (1-based)
    budget_tokens: int | None = None  # the model arm's context.budget_tokens (None: the agent's default)
    traffic_scale: float = 1.0  # the workload's data volume: the simulator's GB/h per instance times this


def agent_config(root: Path, sim_url: str, model_url: str | None, model: str | None, *,
                 model_timeout: float = 600.0, text_tool_calls: str = "reject",
                 budget_tokens: int | None = None) -> Path:
    """The agent's config for a run on the simulator; a model's requests get ``model_timeout`` seconds each and
    the tick room for every step of them (a CPU model's first request of a fleet takes minutes)."""
    (root / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
    os.chmod(root / "vast_api_key", 0o600)
    (root / "knowledge").mkdir(exist_ok=True)
    cfg = root / "config.yaml"
    context = f"context:\n  budget_tokens: {budget_tokens}\n" if budget_tokens else ""
    cfg.write_text(f"""\
agent_id: outcomes
logging:
  level: warning
data_dir: ./data
knowledge_dir: ./knowledge
vast:
  url: {sim_url}
  api_key_env: null
  api_key_file: ./vast_api_key
  min_interval: 0s
demand:
  url: {sim_url}/demand
fleet:
  disk_gb: {CRON_DISK_GB:g}
model:
  provider: {"openai" if model_url else "rules"}
  base_url: {model_url or "http://127.0.0.1:8000/v1"}
  name: {model or "rules-provider"}
  timeout: {math.ceil(model_timeout) if model_url else 60}s
  max_retries: 0
  text_tool_calls: {text_tool_calls}
{context}schedule:
  tick_timeout: {max(3600, math.ceil(model_timeout) * (MAX_STEPS + 2)) if model_url else 3600}s
policy:
  max_instances: {CAPS.max_instances}
  max_total_dph: {CAPS.max_total_dph}
  max_rents_per_hour: {CAPS.max_rents_per_hour}
  max_destroys_per_hour: 24
  allowed_gpus: {json.dumps(sorted(MODEL_BY_NAME))}
  min_reliability: {MIN_RELIABILITY}
""", encoding="utf-8")
    return cfg


class AgentArm:
    """The agent, ticked in this process on the simulator's clock."""

    name = "agent"

    def __init__(self, sim: Sim, root: Path, model_url: str | None, model: str | None, opts: Options) -> None:
        from agent import config
        from agent.runtime.app import App

        self.t = sim.now()
        self.root, self.sim_url, self.model_url, self.model, self.opts = root, sim.url, model_url, model, opts
        # With a model from a later tick, the rules provider runs the fleet until then: the config names it, and
        # the hand-over rewrites the config for the model and opens the same log again, as an operator would.
        self.handover = opts.model_from_tick if model_url and opts.model_from_tick > 1 else None
        rules_first = self.handover is not None
        # the model's budget holds for the rules' ticks too: their thread is compacted to fit the model's window as
        # they go (the rules provider summarises by the fallback), so the model does not take over an overflowing one
        cfg = agent_config(root, sim.url, None if rules_first else model_url, None if rules_first else model,
                           model_timeout=opts.model_timeout, text_tool_calls=opts.text_tool_calls,
                           budget_tokens=opts.budget_tokens)
        self.app = App(config.load(str(cfg)), clock=lambda: self.t)
        self.app.init_database()
        self.failed = 0
        self.ticks = 0  # ticks run so far
        self.decided: list[str] = []  # per tick: "rules" or "model"

    def _hand_over(self) -> None:
        """The model takes over the running fleet: same log, same simulator, the config now naming the model."""
        from agent import config
        from agent.runtime.app import App

        self.app.close()
        cfg = agent_config(self.root, self.sim_url, self.model_url, self.model, model_timeout=self.opts.model_timeout,
                           text_tool_calls=self.opts.text_tool_calls, budget_tokens=self.opts.budget_tokens)
        self.app = App(config.load(str(cfg)), clock=lambda: self.t)

    def say(self, text: str, pin: bool) -> None:
        from agent import feedback

        feedback.say(self.app.log, text, "outcomes-operator", pin=pin)

    def tick(self, now: float) -> None:
        from agent.runtime.tick import run_tick

        self.t = now
        self.ticks += 1
        if self.handover is not None and self.ticks == self.handover:
            self._hand_over()
        self.decided.append("model" if self.model_url and (self.handover is None or self.ticks >= self.handover)
                            else "rules")
        if not run_tick(self.app).ok:
            self.failed += 1

    def alert_keys(self) -> set[str]:
        """Every alert's key, and its key with its severity now (``balance:low!critical``): an expectation may
        name the severity an alert must reach, which changes in place."""
        alerts = self.app.log.store.alerts(all_=True)
        return {a.dedup_key for a in alerts} | {f"{a.dedup_key}{SEVERITY_SEP}{a.severity}" for a in alerts}

    def open_alert_keys(self) -> set[str]:
        return {a.dedup_key for a in self.app.log.store.alerts() if a.status != "resolved"}

    def close(self) -> None:
        self.app.close()


class CronRef:
    name = "cron"

    def __init__(self, sim: Sim) -> None:
        self.arm = CronArm(sim.url, SIM_KEY, f"{sim.url}/demand", CAPS)
        self.failed = 0
        self.decided: list[str] = []


    def say(self, text: str, pin: bool) -> None:
        """A cron script reads no notes: its operator edits it to obey the order the agent is given (the
        scenario's NOTE), so both arms play the directive scenarios under the same order."""
        host = re.search(r"Stop using host (\d+)", text)
        gpu = re.search(r"Only (.+?) from now on", text)
        self.arm.obey(exclude_host=int(host.group(1)) if host else None, only_gpu=gpu.group(1) if gpu else None)

    def tick(self, now: float) -> None:
        self.decided.append("cron")
        self.arm.tick(now)

    def alert_keys(self) -> set[str]:
        return set()

    def open_alert_keys(self) -> set[str]:
        return set()

    def close(self) -> None:
        return


# ------------------------------------------------------------------ one run, its metrics


@dataclass
class Result:
    scenario: str
    arm: str
    ticks: int
    wait_min: float
    unmet_job_ticks: float
    spend: float
    per_job: float | None
    over_instance_ticks: int
    rent_vs_best: float | None
    react_ticks: int | None
    violations: int | None
    alerts_raised: list[str]
    alerts_expected: list[str]
    alert_lag_ticks: dict[str, int]  # per expected key raised: ticks from its cause to its first raise (0: that tick)
    jobs_arrived: float
    jobs_served: float
    failed_ticks: int
    wall_s: float
    tick_s_mean: float  # wall time of the arm's decision per tick (the agent's tick, the cron arm's run)
    tick_s_max: float
    decided_by: str = ""  # which decider ran which ticks (1-based): "rules 1-10, model 11-13"


def decided_by(decided: list[str]) -> str:
    """Per-tick deciders as spans of ticks (1-based): ``["rules", "rules", "model"]`` -> ``rules 1-2, model 3``."""
    spans: list[tuple[str, int, int]] = []
    for n, who in enumerate(decided, 1):
        if spans and spans[-1][0] == who:
            spans[-1] = (who, spans[-1][1], n)
        else:
            spans.append((who, n, n))
    return ", ".join(f"{who} {a}" if a == b else f"{who} {a}-{b}" for who, a, b in spans)


def _need(acc: dict[str, Any]) -> float:
    """Jobs/h the fleet needs: the arrivals, plus the backlog drained within an hour."""
    return float(acc["arrival_rate_per_h"]) + float(acc["pending"])


def _over(live: list[dict[str, Any]], need: float) -> int:
    cap = sum(i["jobs_per_h"] for i in live)
    n = 0
    for i in sorted(live, key=lambda i: (i["jobs_per_h"], i["id"])):
        if cap - i["jobs_per_h"] < need:
            break
        cap -= i["jobs_per_h"]
        n += 1
    return n


def _unmet(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Demand unmet over one tick, by the simulator: a job or more waiting beyond what the running fleet
    finishes in a tick, and the backlog not shrinking."""
    return bool(after["unmet_job_ticks"] - before["unmet_job_ticks"] >= 1.0 and after["pending"] >= before["pending"])


def within(expected: str) -> int:
    """Ticks after its cause the expected alert counts as raised in time."""
    return next((n for key, n in ALERT_WITHIN_BY_KEY.items() if expected.startswith(key)), ALERT_WITHIN)


def due(alerts: dict[str, int], victims: list[int] | None) -> dict[str, int]:
    """The scenario's expected alerts this arm's run can be held to: a per-instance key (``dead:``) is not due when
    the event named its victims and hit none of the arm's instances (an outage of a host the fleet had already
    left: nothing of its died, so no alert is owed)."""
    return {e: c for e, c in alerts.items() if not (e.endswith(":") and victims is not None and not victims)}


def _alert_lag(expected: str, cause: int, first_alert: dict[str, int], victims: list[int]) -> int | None:
    """Ticks from ``cause`` until the expected alert was raised, None if it never was. A per-instance key
    (``dead:``, ``instance:underperforming:``) in a scenario that names its victims counts once raised for each
    of them (the slowest sets the lag): an alert about some other instance does not stand for theirs."""
    def hit(k: str, key: str) -> bool:
        if key == expected:  # a prefix: any alert whose key starts with it
            return k.startswith(key)
        return k == key or k.startswith(key + SEVERITY_SEP)  # one instance's key, exactly

    keys = [f"{expected}{v}" for v in victims] if expected.endswith(":") and victims else [expected]
    lags = [min((t for k, t in first_alert.items() if hit(k, key) and t >= cause), default=None) for key in keys]
    return None if any(t is None for t in lags) else max(t for t in lags if t is not None) - cause


MAX_DPH_PER_INSTANCE = 2.5  # the agent's policy.max_dph_per_instance (its default, which the config keeps)


def _best_on_offer(sim: Sim, traffic_scale: float) -> float | None:
    """The lowest $ per job-capacity among the offers the agent may rent (any number of GPUs within the
    $/h cap per instance, the reliability floor, the disk it asks for): a multi-GPU box cheaper per job than
    any single GPU is the best on offer, whether or not an arm looks at it. Offers on the simulator's failing
    hosts (its ``bad_hosts``: stuck loading, failing containers, exits, offline) are not: they deliver no jobs,
    so no decider that learns from a failed rent should be held to them."""
    bad = {int(h) for h in sim.get("/_sim/state")["bad_hosts"]}
    q = {"limit": 1000, "order": [["id", "asc"]], "dph_total": {"lte": MAX_DPH_PER_INSTANCE},
         "reliability2": {"gte": MIN_RELIABILITY}, "allocated_storage": CRON_DISK_GB}
    offers = sim.http.post("/api/v0/bundles/", json=q, headers={"Authorization": f"Bearer {SIM_KEY}"}).json()["offers"]
    return min((true_per_job(o, traffic_scale) for o in offers if o["host_id"] not in bad), default=None)


def _reacted(sc: Scenario, run: Run, acc: dict[str, Any], live: list[dict[str, Any]]) -> bool:
    if sc.react == "destroyed":
        victims = set(run.notes.get("victims") or [])
        return bool(victims) and not any(i["id"] in victims for i in live)
    if sc.react == "comply":
        host = run.notes.get("host")
        return all(i["host_id"] != host and i["gpu_name"] == "RTX 4090" for i in live)
    healthy = [i for i in live if not i["flapping"]]
    return bool(sum(i["jobs_per_h"] for i in healthy) >= _need(acc))


def _arm_dir(opts: Options, sc: Scenario, arm_name: str) -> tuple[Path, tempfile.TemporaryDirectory[str] | None]:
    """Where the arm's files go: a temporary directory, or keep/<scenario>-<arm>/ (new or empty) to keep."""
    if opts.keep is None:
        tmp = tempfile.TemporaryDirectory(prefix="outcomes-")
        return Path(tmp.name), tmp
    root = opts.keep / f"{sc.name}-{arm_name}"
    if root.exists() and any(root.iterdir()):
        raise FileExistsError(f"{root} is not empty: --keep needs a new or empty directory per scenario and arm")
    root.mkdir(parents=True, exist_ok=True)
    return root, None


def _progress(opts: Options, what: str, seconds: float, failed: bool, live: list[dict[str, Any]],
              acc: dict[str, Any]) -> None:
    """With --progress, a line for the tick just run: its wall time, whether it failed, the fleet and queue after."""
    if opts.progress:
        print(f"{what}: {seconds:.1f} s{' (failed)' if failed else ''}; {len(live)} live, "
              f"{float(acc['pending']):.0f} jobs pending", file=sys.stderr, flush=True)


def _keep(opts: Options, root: Path, acc: dict[str, Any], result: Result) -> None:
    """With --keep, the simulator's final accounting and the result beside the arm's config and data."""
    if opts.keep is not None:
        (root / "accounting.json").write_text(json.dumps(acc, indent=1) + "\n", encoding="utf-8")
        (root / "result.json").write_text(json.dumps(asdict(result), indent=1) + "\n", encoding="utf-8")


def run_one(sc: Scenario, arm_name: str, ticks: int, seed: int, model_url: str | None,
            model: str | None, observe: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
            opts: Options | None = None) -> Result:
    """One scenario with one arm on a fresh simulator; `observe(first, last)` gets the simulator's
    accounting before the first tick and after the last."""
    opts = opts or Options()
    t0 = time.monotonic()
    root, tmp = _arm_dir(opts, sc, arm_name)
    sim: Sim | None = None
    arm: AgentArm | CronRef | None = None
    try:
        sim = Sim(seed)
        arm = AgentArm(sim, root, model_url, model, opts) if arm_name == "agent" else CronRef(sim)
        run = Run(sim, arm.say)
        sim.post("/_sim/demand", {"pending": 0})
        sim.post("/_sim/traffic", {"scale": opts.traffic_scale})
        sc.setup(run)
        base = sim.get("/_sim/accounting")
        now = float(base["now"])
        over = 0
        react: int | None = None
        note_at: float | None = None
        first_alert: dict[str, int] = {}
        open_at: list[set[str]] = []  # per tick, the agent's alerts open after its decision
        unmet_causes: list[int] = []  # ticks that first could see demand unmet for UNMET_AFTER ticks
        streak, prev = 0, base
        first_event = min(sc.events) if sc.events else 0
        rent_ratios: list[float] = []
        tick_s: list[float] = []
        for n in range(ticks):
            if sc.directive and n == sc.event_tick:
                note_at = now  # the note goes in at the event tick: rents from then on must obey it
            if n in sc.events:
                sc.events[n](run)
            best = _best_on_offer(sim, opts.traffic_scale) if n >= first_event else None
            failed, started = arm.failed, time.monotonic()
            arm.tick(now)
            tick_s.append(time.monotonic() - started)
            for k in arm.alert_keys():
                first_alert.setdefault(k, n)
            open_at.append(arm.open_alert_keys())
            now = float(sim.post("/_sim/advance", {"seconds": TICK_S})["now"])
            acc = sim.get("/_sim/accounting")
            streak = streak + 1 if _unmet(prev, acc) else 0
            if streak == UNMET_AFTER:
                unmet_causes.append(n + 1)  # the next tick is the first that can see it
            prev = acc
            live = [i for i in acc["instances"] if i["status"] in LIVE]
            if best:
                rent_ratios += [true_per_job(i, opts.traffic_scale) / best
                                for i in acc["instances"] if now - TICK_S <= i["rented_at"] < now]
            over += _over(live, _need(acc))
            if react is None and n >= sc.event_tick and _reacted(sc, run, acc, live):
                react = n - sc.event_tick + 1
            _progress(opts, f"{sc.name} {arm_name} tick {n + 1}/{ticks} ({arm.decided[-1]})", tick_s[-1],
                      arm.failed > failed, live, acc)
        acc = sim.get("/_sim/accounting")
        if observe is not None:
            observe(base, acc)
        arrived = acc["jobs_arrived"] - base["jobs_arrived"]
        served = acc["jobs_served"] - base["jobs_served"]
        waited = acc["job_hours_waited"] - base["job_hours_waited"]
        unmet = acc["unmet_job_ticks"] - base["unmet_job_ticks"]
        spend = acc["spend"] - base["spend"]
        violations = None
        if sc.directive:
            host = run.notes.get("host")
            violations = sum(1 for i in acc["instances"] if note_at is not None and i["rented_at"] >= note_at
                             and (i["host_id"] == host or i["gpu_name"] != "RTX 4090"))
        alerts = due(sc.alerts, run.notes.get("victims"))
        lag = {e: t for e, cause in alerts.items()
               if (t := _alert_lag(e, cause, first_alert, run.notes.get("victims") or [])) is not None}
        expected = list(alerts)
        for cause in (c for c in unmet_causes if c < ticks):
            key = f"{UNMET_KEY}@{cause}"
            expected.append(key)
            seen = [t for t in range(cause, ticks) if any(k.startswith(UNMET_KEY) for k in open_at[t])]
            if seen:
                lag[key] = seen[0] - cause
        raised = sorted(k for k, t in lag.items() if t <= within(k))
        result = Result(sc.name, arm_name, ticks, round(60.0 * waited / arrived, 2) if arrived else 0.0,
                        round(unmet, 1), round(spend, 4), round(spend / served, 4) if served else None, over,
                        round(sum(rent_ratios) / len(rent_ratios), 2) if rent_ratios else None, react,
                        violations, raised, expected, lag, round(arrived, 1), round(served, 1), arm.failed,
                        round(time.monotonic() - t0, 2), round(sum(tick_s) / len(tick_s), 2),
                        round(max(tick_s), 2), decided_by(arm.decided))
        _keep(opts, root, acc, result)
        return result
    finally:
        if arm is not None:
            arm.close()
        if sim is not None:
            sim.close()
        if tmp is not None:
            tmp.cleanup()


# ------------------------------------------------------------------ report

COLS = (("wait", "wait_min", "{:.1f}"), ("unmet", "unmet_job_ticks", "{:.0f}"), ("spend", "spend", "{:.2f}"),
        ("$/job", "per_job", "{:.4f}"), ("over", "over_instance_ticks", "{:d}"), ("rent", "rent_vs_best", "{:.2f}"),
        ("react", "react_ticks", "{:d}"))


def ratio(a: float | int | None, b: float | int | None) -> str:
    if a is None or b is None:
        return "-"
    if b == 0:
        return "=" if a == 0 else "inf"
    return f"{a / b:.2f}x"


def table(results: list[Result], decider: str) -> str:
    head = (f"{'scenario':<10} {'arm':<6}" + "".join(f" {c:>14}" for c, _, _ in COLS)
            + f" {'viol':>5} {'alerts':>8} {'tick s':>11}")
    lines = [head, "-" * len(head)]
    by = {(r.scenario, r.arm): r for r in results}
    for name in dict.fromkeys(r.scenario for r in results):
        a, c = by.get((name, "agent")), by.get((name, "cron"))
        for r in (a, c):
            if r is None:
                continue
            cells = []
            for _, key, fmt in COLS:
                v = getattr(r, key)
                txt = "-" if v is None else fmt.format(v)
                if r.arm == "agent" and c is not None:
                    txt += f" ({ratio(v, getattr(c, key))})"
                cells.append(f" {txt:>14}")
            viol = "-" if r.violations is None else str(r.violations)
            alerts = f"{len(r.alerts_raised)}/{len(r.alerts_expected)}" if r.arm == "agent" and r.alerts_expected \
                else "-"
            wall = f"{r.tick_s_mean:.2f}/{r.tick_s_max:.2f}"
            lines.append(f"{name:<10} {decider if r.arm == 'agent' else 'cron':<6}" + "".join(cells)
                         + f" {viol:>5} {alerts:>8} {wall:>11}")
    mixed = [r for r in results if r.arm == "agent" and "," in r.decided_by]
    if mixed:  # the figures cover every tick: say which the model decided
        lines.append("ticks decided by: " + "; ".join(f"{r.scenario} {r.decided_by}" for r in mixed))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--decider", choices=("rules",), default="rules", help="the built-in rules provider (default)")
    p.add_argument("--model-url", help="an OpenAI-compatible server's base URL: decide with this model instead")
    p.add_argument("--model", help="the model's name on that server")
    p.add_argument("--model-timeout", type=float, default=600.0, metavar="SECONDS",
                   help="seconds each model request may take (default 600: a CPU model's first takes minutes)")
    p.add_argument("--model-from-tick", type=int, default=1, metavar="N",
                   help="with --model-url: the rules provider decides ticks 1..N-1, the model from tick N on (it "
                        "takes over the running fleet, its thread holding the rules' ticks); default 1")
    p.add_argument("--budget-tokens", type=int, metavar="N",
                   help="the model arm's context.budget_tokens, the rules' ticks before --model-from-tick included "
                        "(default: the agent's, 30000); at most the server's window, or the first request is refused "
                        "and the tick compacts to fit")
    p.add_argument("--text-tool-calls", choices=("reject", "accept"), default="reject",
                   help="the model arm's model.text_tool_calls: accept also runs calls written as text")
    p.add_argument("--progress", action="store_true", help="a line per tick, with its wall time, to stderr")
    p.add_argument("--keep", type=Path, metavar="DIR",
                   help="keep each arm's directory (config, data dir and log, the simulator's accounting) as "
                        "DIR/<scenario>-<arm>/")
    p.add_argument("--scenarios", help="comma-separated names (default: all; --list shows them)")
    p.add_argument("--ticks", type=int, default=36, help="5-minute ticks per scenario (default 36: 3 h)")
    p.add_argument("--seed", type=int, default=7, help="the simulator's seed (default 7)")
    p.add_argument("--traffic-scale", type=float, default=1.0, metavar="X",
                   help="the workload moves X times the simulator's data an hour per instance (default 1: "
                        "0.2-3 GB up, 0.5-6 down), billed at each host's $/GB")
    p.add_argument("--no-cron", action="store_true", help="skip the cron arm (no ratios)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    a = p.parse_args(argv)
    if a.list:
        for s in SCENARIOS.values():
            print(f"{s.name:<10} {s.what}")
        return 0
    if bool(a.model_url) != bool(a.model):
        p.error("--model-url and --model go together")
    names = a.scenarios.split(",") if a.scenarios else list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; one of {', '.join(SCENARIOS)}")
    if a.ticks < 1:
        p.error("--ticks must be at least 1")
    if a.model_timeout <= 0:
        p.error("--model-timeout must be positive")
    if a.budget_tokens is not None and (not a.model_url or a.budget_tokens < 1000):
        p.error("--budget-tokens needs --model-url and is at least 1000")
    if a.model_from_tick != 1 and not a.model_url:
        p.error("--model-from-tick needs --model-url and --model")
    if not 1 <= a.model_from_tick <= a.ticks:
        p.error(f"--model-from-tick must be between 1 and --ticks ({a.ticks}); got {a.model_from_tick}")
    arms = ("agent",) if a.no_cron else ("agent", "cron")
    if a.keep is not None:
        used = [str(d) for d in (a.keep / f"{n}-{arm}" for n in names for arm in arms) if d.exists() and any(d.iterdir())]
        if used:
            p.error(f"--keep needs new or empty directories; not empty: {', '.join(used)}")
    opts = Options(a.model_timeout, a.text_tool_calls, a.progress, a.keep, a.model_from_tick, a.budget_tokens,
                   a.traffic_scale)
    from agent import logsetup

    logsetup.configure("error", "auto")  # the table is the output; the agent's story is in its log
    t0 = time.monotonic()
    results = []
    for name in names:
        for arm in arms:
            results.append(run_one(SCENARIOS[name], arm, a.ticks, a.seed, a.model_url, a.model, opts=opts))
    wall = time.monotonic() - t0
    decider = "model" if a.model_url else "rules"
    if a.json:
        print(json.dumps({"decider": a.model or decider, "model_from_tick": a.model_from_tick, "seed": a.seed,
                          "ticks": a.ticks, "traffic_scale": a.traffic_scale, "wall_s": round(wall, 1), "results": [asdict(r) for r in results]}, indent=2))
    else:
        handover = f" from tick {a.model_from_tick} (rules before)" if a.model_from_tick > 1 else ""
        handover += f", {a.traffic_scale:g}x the data per instance" if a.traffic_scale != 1.0 else ""
        print(f"outcomes: decider {a.model or decider}{handover}, seed {a.seed}, {a.ticks} ticks of {TICK_S / 60:.0f} min; "
              "ratios are the agent's figure over the cron arm's; tick s: wall time per decision, mean/max")
        print(table(results, decider))
        print(f"wall time {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
