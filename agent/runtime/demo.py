"""`fleet-agent demo`: a whole fleet in a minute, with nothing to set up.

A throwaway data dir and config, the vast.ai simulator in-process on a free
loopback port with accelerated time, and N ticks with the built-in rules
provider (or a real OpenAI-compatible model). Midway an operator steps in —
acks an alert, blacklists a flaky host in a knowledge file, pins a directive —
and the viewer sees each enter the thread and change what the agent does. The
budget is small, so the context compacts during the run.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agent import config, feedback
from agent import context as ctxmod
from agent.context.inputs import manifest_of, recorded
from agent.context.seen import OPERATOR_KINDS
from agent.events import Event, render
from agent.runtime.app import App
from agent.sim import ManualClock, SimServer, Simulator

SIM_KEY = "demo-sim-key"
TICK_SECONDS = 300.0
START = 1_800_000_000.0

KNOWLEDGE = """\
# Fleet notes (operators edit this file; the agent reads every change)

- Prefer the cheapest allowed offers; reliability above 0.95.
- Scale to the proof queue: idle GPUs burn money.
"""


MODEL_TIMEOUT_S = 600.0  # --model-url's default: a cold CPU model needs minutes for a fleet's first request


def write_demo_dir(root: Path, sim_url: str, *, model_url: str | None, model: str | None, budget: int,
                   model_timeout: float | None = None) -> Path:
    """The demo's files under ``root``: the simulator's key (0600), the knowledge file and the config;
    returns the config's path."""
    (root / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
    os.chmod(root / "vast_api_key", 0o600)
    (root / "knowledge").mkdir(exist_ok=True)
    (root / "knowledge" / "fleet-notes.md").write_text(KNOWLEDGE, encoding="utf-8")
    cfg = root / "config.yaml"
    cfg.write_text(demo_config(root, sim_url, model_url=model_url, model=model, budget=budget,
                               model_timeout=model_timeout), encoding="utf-8")
    return cfg


def demo_config(root: Path, sim_url: str, *, model_url: str | None, model: str | None, budget: int,
                model_timeout: float | None = None) -> str:
    provider = "openai" if model_url else "rules"
    timeout = model_timeout if model_timeout is not None else (MODEL_TIMEOUT_S if model_url else 60.0)
    return f"""\
# Written by `fleet-agent demo`: the example defaults, pointed at the simulator.
agent_id: demo
data_dir: ./data
knowledge_dir: ./knowledge
vast:
  url: {sim_url}
  api_key_env: null
  api_key_file: ./vast_api_key
demand:
  url: {sim_url}/demand
model:
  provider: {provider}
  base_url: {model_url or "http://127.0.0.1:8000/v1"}
  name: {model or "rules-provider"}
  timeout: {timeout:g}s
schedule:
  tick_timeout: {max(600.0, 8 * timeout):g}s
context:
  budget_tokens: {budget}
  output_reserve: 1000
  high_water: 0.6
  low_water: 0.35
  tool_output_max_tokens: 600
  summary_max_tokens: 700
  knowledge_max_tokens: 600
  pinned_max_tokens: 1500
policy:
  max_instances: 8
  max_total_dph: 8.0
  max_rents_per_hour: 8
  max_destroys_per_hour: 12
alerts:
  stuck_after: 15m
"""


@dataclass
class Totals:
    rentals: int = 0
    destroys: int = 0
    blocked: int = 0
    alerts: int = 0
    compactions: int = 0
    prompt_tokens: int = 0  # as the provider reported them (the rules provider reports none)
    request_tokens: int = 0  # as projected from the log for every request
    failed_ticks: int = 0
    operator: list[str] = field(default_factory=list)


class Spinner:
    def __init__(self, out: IO[str], enabled: bool) -> None:
        self.out, self.enabled = out, enabled

    def wait(self, seconds: float, label: str) -> None:
        if seconds <= 0:
            return
        if not self.enabled:
            time.sleep(seconds)
            return
        end = time.monotonic() + seconds
        for ch in itertools.cycle("|/-\\"):
            if time.monotonic() >= end:
                break
            self.out.write(f"\r  {ch} {label}")
            self.out.flush()
            time.sleep(0.1)
        self.out.write("\r" + " " * (len(label) + 4) + "\r")


def _fmt_event(e: Event) -> str | None:
    p = e.payload
    if e.kind == "tool.result":
        body = (p.get("output") if p["ok"] else p.get("error")) or ""
        first = body.splitlines()[0] if body else ""
        if not p["ok"] and first.startswith("blocked by policy"):
            return f"  !! BLOCKED {p['name']}: {first[len('blocked by policy: '):]}"
        mark = "ok " if p["ok"] else "ERR"
        return f"  {mark} {p['name']}: {first[:110]}"
    if e.kind == "model.response" and p.get("text"):
        return f"  >> {p['text'][:150]}"
    if e.kind == "alert.raised":
        return f"  ** alert #{p['alert_id']} ({p['severity']}): {p['title'][:100]}"
    if e.kind == "alert.acked":
        return f"  <- operator {p['by']} acked alert #{p['alert_id']}: {p.get('note') or ''}"
    if e.kind == "knowledge.changed":
        return f"  <- knowledge edit: {p['name']} ({p['change']})"
    if e.kind == "operator.note":
        tag = f"directive #{e.seq}" if p.get("pin") else "note"
        return f"  <- operator {tag} from {p['by']}: {p['text']}"
    if e.kind == "context.compacted":
        return (f"  ~~ context compacted ({p['method']}): events #{p.get('covered_from')}–#{p['covered_to']} "
                f"summarised, {p.get('tokens_before')} -> {p.get('tokens_after')} tokens")
    if e.kind == "tick.failed":
        return f"  XX tick failed: {p['reason']}"
    return None


def run_demo(*, ticks: int = 15, speed: float = 600.0, model_url: str | None = None, model: str | None = None,
             keep: str | None = None, out: IO[str] | None = None, seed: int = 11, budget: int = 6000,
             model_timeout: float | None = None) -> int:
    out = out or sys.stdout
    tty = out.isatty()
    root = Path(keep).resolve() if keep else Path(tempfile.mkdtemp(prefix="fleet-agent-demo-"))
    if keep and (root / "config.yaml").exists():
        out.write(f"demo: {root} already holds a demo; choose an empty directory\n")
        return 2
    root.mkdir(parents=True, exist_ok=True)
    clock = ManualClock(START)
    sim = Simulator(seed=seed, clock=clock, api_key=SIM_KEY)
    server = SimServer(sim).start()
    app: App | None = None
    try:
        cfg = write_demo_dir(root, server.url, model_url=model_url, model=model, budget=budget,
                             model_timeout=model_timeout)
        settings = config.load(str(cfg))
        app = App(settings, clock=clock)
        app.init_database()  # as 'fleet-agent init' does
        totals = Totals()
        out.write(f"fleet-agent demo: simulator at {server.url} (seed {seed}), {ticks} ticks of "
                  f"{TICK_SECONDS / 60:.0f} simulated minutes, model: "
                  f"{settings.model.name if model_url else 'the built-in rules provider (not an LLM)'}\n"
                  f"context budget {settings.context.budget_tokens} tokens; data in {root}\n\n")
        spinner = Spinner(out, tty)
        from agent.runtime.tick import run_tick

        last_seq = app.log.last_seq()
        ack_at, edit_at, pin_at = max(2, ticks // 4), max(3, ticks // 4 + 1), max(4, ticks // 4 + 2)
        for n in range(1, ticks + 1):
            _operator(app, n, ack_at, edit_at, pin_at, sim, totals)
            r = run_tick(app)
            obs = _observation(app)
            d = obs.get("demand") or {}
            ours = [i for i in obs.get("instances", []) if i["ours"]]
            counts = {k: sum(1 for i in ours if (i["status"] == k)) for k in ("running", "loading", "created")}
            failed = sum(1 for i in ours if i["status"] in ("exited", "offline", "unknown"))
            out.write(f"tick {r.tick} · {time.strftime('%H:%M', time.gmtime(clock()))} sim · "
                      f"queue {d.get('pending', '?')} pending, {d.get('completed', '?')} done · fleet "
                      f"{counts['running']} running / {counts['loading'] + counts['created']} starting / "
                      f"{failed} failed · ${obs.get('fleet_dph', 0):.2f}/h · balance ${obs.get('balance') or 0:.2f}\n")
            for e in app.log.read(last_seq):
                line = _fmt_event(e)
                if line:
                    out.write(line + "\n")
                _count(e, totals)
            last_seq = app.log.last_seq()
            proj = ctxmod.project(app.log, app.prompts, settings.context, policy=app.policy_dict(),
                                  tools=app.tool_specs(), model=settings.model.name,
                                  cache=app.projection_cache)
            out.write(f"  context {proj.calibrated_tokens}/{settings.context.budget_tokens} tokens"
                      + ("" if r.ok else f" · tick FAILED: {r.reason}") + "\n\n")
            if not r.ok:
                totals.failed_ticks += 1
            if n < ticks:
                spinner.wait(TICK_SECONDS / speed, "waiting for the next tick ...")
                clock.advance(TICK_SECONDS)
        verify = app.log.verify()
        demand = sim.demand()
        spent = 500.0 - (sim.balance if hasattr(sim, "balance") else 500.0)
        out.write("demo finished\n")
        out.write(f"  spend ${spent:.2f} · jobs completed {demand.get('completed')} · rentals {totals.rentals} · "
                  f"destroys {totals.destroys} · blocked calls {totals.blocked} · alerts {totals.alerts} · "
                  f"compactions {totals.compactions} · request tokens {totals.request_tokens}"
                  + (f" (provider-reported {totals.prompt_tokens})" if totals.prompt_tokens else "") + "\n")
        out.write(f"  operator: {'; '.join(totals.operator) or 'none'}\n")
        seen, total = operator_inputs_seen(app)
        out.write(f"  operator inputs seen by the model: {seen}/{total}\n")
        out.write(f"  log: {verify.checked} events, chain {'verifies' if verify.ok else 'BROKEN: ' + str(verify.reason)}\n\n")
        c = f"{command_name()} --config {shlex.quote(str(cfg))}"
        mid = max(1, ticks // 2)
        out.write("explore what was recorded:\n"
                  f"  {c} thread show --kind operator. --kind alert. --kind knowledge.\n"
                  f"  {c} thread show --kind tool. --limit 40\n"
                  f"  {c} context --tick {mid}\n"
                  f"  {c} replay --verify\n"
                  f"  {c} log verify\n"
                  f"  {c} alerts list --all\n")
        if not keep:
            out.write(f"  (the data stays in {root} until you delete it; --keep DIR chooses where)\n")
        return 0 if verify.ok and totals.failed_ticks == 0 else 1
    finally:
        if app is not None:
            app.close()
        server.stop()


def command_name(argv0: str | None = None, path: str | None = None) -> str:
    """How to run fleet-agent from the operator's shell: ``fleet-agent`` when that is on ``path`` ($PATH) and
    is this program, else the path this program was started by (``.venv/bin/fleet-agent``), else this Python
    with ``-m agent.cli``."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    found = shutil.which("fleet-agent", path=path)
    if Path(argv0).name == "fleet-agent":
        if found is not None and Path(found).resolve() == Path(argv0).resolve():
            return "fleet-agent"
        return shlex.quote(argv0)
    if found is not None:
        return "fleet-agent"
    return f"{shlex.quote(sys.executable)} -m agent.cli"


def operator_inputs_seen(app: App) -> tuple[int, int]:
    """(seen, total): operator inputs (acks, notes, directives, unpins, knowledge edits) whose rendered
    text appears verbatim in a request the model answered, re-projected from the log."""
    log, s = app.log, app.settings
    inputs = [e for e in log.read(0, kinds=list(OPERATOR_KINDS))]
    answered = {int(e.payload["request_seq"]) for e in log.read(0, kinds=["model.response"])
                if isinstance(e.payload.get("request_seq"), int)}
    requests = [e for e in log.read(0, kinds=["model.request"]) if e.seq in answered]
    texts = recorded(log)
    seen = 0
    for ev in inputs:
        msg = render(ev)
        req = next((r for r in requests if r.payload["manifest"]["covered_to"] < ev.seq
                    <= r.payload["manifest"]["thread_to"]), None)
        if msg is None or req is None:
            continue
        m = manifest_of(req, texts)
        proj = ctxmod.project(log, app.prompts, ctxmod.settings_from_manifest(s.context, m),
                              policy=app.policy_dict(), tools=app.tool_specs(), model=m.get("model", ""),
                              until_seq=int(m["thread_to"]), cache=app.projection_cache)
        seen += any(x.get("content") == msg["content"] for x in proj.messages)
    return seen, len(inputs)


def _observation(app: App) -> dict[str, Any]:
    e = next(app.log.read(0, kinds=["tick.started"], newest_first=True, limit=1), None)
    return e.payload["observation"] if e else {}


def _count(e: Event, t: Totals) -> None:
    p = e.payload
    if e.kind == "tool.result" and p["ok"] and p.get("effect"):
        if p["effect"]["type"] == "rented":
            t.rentals += 1
        elif p["effect"]["type"] == "destroyed":
            t.destroys += 1
    elif e.kind == "policy.blocked":
        t.blocked += 1
    elif e.kind == "alert.raised":
        t.alerts += 1
    elif e.kind == "context.compacted":
        t.compactions += 1
    elif e.kind == "model.request":
        t.request_tokens += int(p["manifest"].get("estimated_tokens") or 0)
    elif e.kind == "model.response":
        t.prompt_tokens += int((p.get("usage") or {}).get("prompt_tokens") or 0)


def _operator(app: App, n: int, ack_at: int, edit_at: int, pin_at: int, sim: Simulator, t: Totals) -> None:
    """The scripted operator: steps in between ticks, exactly as the CLI would (once each)."""
    log = app.log
    if n >= ack_at and not any(x.startswith("acked") for x in t.operator):
        first = next(iter(log.store.open_alerts()), None)
        if first is not None:
            feedback.ack(log, first.id, "demo-operator", "seen it; replace broken machines and keep going")
            t.operator.append(f"acked alert #{first.id}")
    if n >= edit_at and not any(x.startswith("blacklisted") for x in t.operator):
        hosts = sorted(_flaky_hosts(app, sim, fallback=n >= edit_at + 2))[:3]
        if hosts:
            path = app.settings.knowledge_path / "fleet-notes.md"
            text = path.read_text(encoding="utf-8")
            text += f"- Avoid hosts {', '.join(str(h) for h in hosts)}: flaky (failed starts).\n"
            path.write_text(text, encoding="utf-8")
            t.operator.append(f"blacklisted hosts {hosts} in fleet-notes.md")
    if n == pin_at:
        feedback.say(log, "Keep at most 5 instances until further notice: budget review.", "demo-operator", pin=True)
        t.operator.append("pinned 'at most 5 instances'")


def _flaky_hosts(app: App, sim: Simulator, *, fallback: bool) -> set[int]:
    """Hosts our instances failed on, else the simulator's known-bad hosts among cheap offers."""
    seen = set()
    for e in app.log.read(0, kinds=["tick.started"]):
        for i in e.payload["observation"].get("instances", []):
            if i["status"] in ("exited", "offline", "unknown") or "OCI" in (i.get("status_msg") or "") \
                    or (i["status"] != "running" and i["age_s"] > 600):
                seen.add(i["host_id"])
    if not seen and fallback:
        seen = set(sorted(sim.bad_hosts)[:3])
    return seen



