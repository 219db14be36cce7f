"""Ticks against a real OpenAI-compatible model and the vast.ai simulator: how a model behaves as fleet-agent's
decision maker.

Runs N ticks (the simulated clock moves 5 minutes between them; demand is pending so there is work) against
any OpenAI-compatible endpoint, then prints the figures, one per line, and one JSON object on the last line:
tool calls parsed / executed / refused by policy / not run (bad arguments or unknown tool), text-written calls
detected, idle ticks, share of prompt tokens the server reported as cached, step latency p50/p95, and the
ticks that failed with their reasons. Not part of CI: a CPU model needs minutes per tick.

    PYTHONPATH=. .venv/bin/python bench/real_model.py http://127.0.0.1:18801/v1 MODEL [--ticks 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))], 1)


def figures(log: Any) -> dict[str, Any]:
    """The figures of every tick in ``log``."""
    parsed = executed = blocked = not_run = text_calls = 0
    prompt = cached = 0
    latencies: list[float] = []
    acted: dict[int, bool] = {}
    failed: list[str] = []
    kinds: Counter[str] = Counter()
    for e in log.read(0):
        kinds[e.kind] += 1
        p = e.payload
        if e.kind == "model.response":
            parsed += len(p.get("tool_calls") or [])
            acted[int(e.tick or 0)] = acted.get(int(e.tick or 0), False) or bool(p.get("tool_calls"))
            usage = p.get("usage") or {}
            prompt += int(usage.get("prompt_tokens") or 0)
            cached += int(usage.get("cached_tokens") or 0)
            latencies.append(float(p.get("latency_ms") or 0.0))
        elif e.kind == "tool.called":
            executed += 1
        elif e.kind == "policy.blocked":
            blocked += 1
        elif e.kind == "tool.result" and not p.get("ok") and str(p.get("error") or "").startswith("not run"):
            not_run += 1
        elif e.kind == "model.text_tool_calls":
            text_calls += len(p.get("calls") or [])
        elif e.kind == "tick.failed":
            failed.append(f"tick {e.tick}: {p.get('reason')}"[:300])
    return {
        "ticks": kinds["tick.started"], "ticks_failed": len(failed), "failures": failed,
        "tool_calls_parsed": parsed, "tool_calls_executed": executed, "refused_by_policy": blocked,
        "not_run_bad_arguments_or_tool": not_run, "text_written_calls_detected": text_calls,
        "idle_ticks": sum(1 for v in acted.values() if not v),  # ticks the model answered without a tool call
        "idle_alerts": sum(1 for e in log.read(0, kinds=["alert.raised"]) if "has not acted" in e.payload["title"]),
        "prompt_tokens": prompt, "cached_prompt_tokens": cached,
        "cached_share": round(cached / prompt, 3) if prompt else None,
        "step_latency_ms_p50": _pct(latencies, 0.5), "step_latency_ms_p95": _pct(latencies, 0.95),
        "steps": len(latencies), "retries": kinds["model.retry"], "model_failed": kinds["model.failed"],
        "steps_refused_over_budget": kinds["context.step_refused"], "compactions": kinds["context.compacted"],
        "window_learned": kinds["model.window"],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url", help="the OpenAI-compatible base URL, e.g. http://127.0.0.1:18801/v1")
    ap.add_argument("model", help="the model name the server serves")
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--budget", type=int, default=8000, help="context.budget_tokens (default 8000)")
    ap.add_argument("--timeout", type=float, default=600.0, help="model.timeout in seconds (default 600)")
    ap.add_argument("--max-steps", type=int, default=6, help="schedule.max_steps (default 6)")
    ap.add_argument("--text-tool-calls", choices=["reject", "accept"], default="reject")
    ap.add_argument("--pending", type=float, default=400.0, help="jobs pending in the simulated queue at start")
    ap.add_argument("--keep", metavar="DIR", help="keep the data directory here (default: a temporary one)")
    args = ap.parse_args(argv)

    from agent import config, logsetup
    from agent.runtime.app import App
    from agent.runtime.demo import SIM_KEY, START, TICK_SECONDS, write_demo_dir
    from agent.runtime.tick import run_tick
    from agent.sim import ManualClock, SimServer, Simulator

    logsetup.configure("warning", "console", stream=sys.stderr)
    root = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="fa-real-model-"))
    root.mkdir(parents=True, exist_ok=True)
    clock = ManualClock(START)
    sim = Simulator(seed=11, clock=clock, api_key=SIM_KEY)
    sim.pending = args.pending
    server = SimServer(sim).start()
    try:
        cfg = write_demo_dir(root, server.url, model_url=args.url, model=args.model, budget=args.budget)
        s = config.load(str(cfg))
        model_fields = {"timeout": args.timeout}
        if any(f.name == "text_tool_calls" for f in dataclasses.fields(s.model)):
            model_fields["text_tool_calls"] = args.text_tool_calls  # type: ignore[assignment]
        s = dataclasses.replace(s, model=dataclasses.replace(s.model, **model_fields),
                                schedule=dataclasses.replace(s.schedule, max_steps=args.max_steps,
                                                             tick_timeout=args.timeout * (args.max_steps + 1)))
        app = App(s, clock=clock)
        app.init_database()
        started = time.monotonic()
        for n in range(1, args.ticks + 1):
            t0 = time.monotonic()
            r = run_tick(app)
            print(f"tick {n}: {'ok' if r.ok else 'FAILED'} in {time.monotonic() - t0:.0f} s, {r.steps} steps"
                  + (f", actions {r.actions}" if r.actions else "") + ("" if r.ok else f": {r.reason}"), flush=True)
            clock.advance(TICK_SECONDS)
        out = figures(app.log)
        out["wall_s"] = round(time.monotonic() - started, 1)
        out["model"] = args.model
        out["verify_ok"] = app.log.verify().ok
        app.close()
    finally:
        server.stop()
    for k, v in out.items():
        if k != "failures":
            print(f"{k}: {v}")
    for f in out["failures"]:
        print(f"  {f}")
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
