"""Benchmark the context projection; prints ONE JSON object.

    python bench/context.py            # full run (builds up to 10^6 events once, cached under /tmp)
    python bench/context.py --quick    # seconds-long smoke run

Figures:
- project_ms_p50 at 10^3..10^6 events, next to a naive full replay (read and
  render every event from seq 1);
- prefix_reuse: share of each request's tokens that is an exact prefix of the
  previous request, ours vs a "last 8 events" window and a "newest-first fill
  to the token budget" window;
- directive_retention of directives planted over many ticks (ours vs baselines);
- compactions per 100 ticks and summary sizes (fallback summariser: deterministic);
- peak RSS (ru_maxrss) after projecting the 10^6-event log.

Synthetic logs are shaped like real ticks (~1,500 tokens each: an observation,
two tool calls and results, a short answer; an operator note or ack every ~20
ticks). Big logs are built once through ``Transaction.append`` in large
transactions, with a ``context.compacted`` every few ticks as a running daemon
would leave them, and cached by size.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog  # noqa: E402

from agent.compaction import compact  # noqa: E402
from agent.context import ContextSettings, empty_pinned, fold_pinned, project, request_payload  # noqa: E402
from agent.events import render  # noqa: E402
from agent.log import EventLog  # noqa: E402
from agent.prompts import load_prompts  # noqa: E402

CACHE = Path("/tmp/fleet-agent-bench")
POLICY = {"max_instances": 8, "max_dph": 0.6, "allowed_gpus": ["RTX_4090", "A100"], "image": "prover:1.4"}
TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} tool",
                                           "parameters": {"type": "object", "properties": {}}}}
         for n in ("search_offers", "rent_offer", "destroy_instance", "reboot_instance", "read_logs",
                   "raise_alert", "remember", "forget", "search_history", "read_knowledge")]
SETTINGS = ContextSettings()
COMPACT_EVERY = 10  # ticks between synthetic compactions in the big logs
ACTIVE_DIRECTIVES = 10  # standing directives alive at once in the big logs

WORDS = ("offer host gpu RTX_4090 A100 dph reliability verified disk inet_down cuda driver 535 proof queue "
         "pending running latency ok error timeout status loading exited image label").split()


def _text(n: int, k: int) -> str:
    return " ".join(f"{WORDS[(n * 31 + i * 7) % len(WORDS)]}{(n + i) % 97}" for i in range(k))


def tick_items(n: int) -> list[tuple[str, dict[str, Any], str, int | None]]:
    """One synthetic tick (~1,500 tokens of model-visible text)."""
    obs = {"time": 1_795_000_000 + n * 300, "balance": 5000.0 - n * 0.01,
           "instances": [{"id": 20000 + i, "gpu_name": "RTX_4090", "num_gpus": 1, "status": "running",
                          "age_s": 3600 + n * 300, "dph": 0.38 + i / 100, "host_id": 100 + i} for i in range(8)],
           "demand": {"pending": 10 + n % 17, "running": 8, "completed": 40 * n, "arrival_rate_per_h": 120.0}}
    calls = [{"id": f"call_{n}_0", "name": "search_offers", "arguments": json.dumps({"gpu": "RTX_4090", "limit": 5})},
             {"id": f"call_{n}_1", "name": "read_logs", "arguments": json.dumps({"instance_id": 20000 + n % 8})}]
    items: list[tuple[str, dict[str, Any], str, int | None]] = [
        ("tick.started", {"observation": obs}, "scheduler", n),
        ("model.response", {"text": "", "tool_calls": calls}, "model", n)]
    for i, c in enumerate(calls):
        items.append(("tool.called", {"call_id": c["id"], "name": c["name"], "arguments": c["arguments"]}, "tool", n))
        items.append(("tool.result", {"call_id": c["id"], "name": c["name"], "ok": True,
                                      "output": _text(n + i, 260)}, "tool", n))
    items.append(("model.response", {"text": f"Tick {n}: queue {10 + n % 17} pending, 8 running; holding the "
                                      "fleet steady, no offer beats the current hosts.", "tool_calls": []}, "model", n))
    items.append(("tick.completed", {"steps": 2}, "scheduler", n))
    if n % 20 == 0:
        items.append(("operator.note", {"text": f"note {n}: keep spend under $4/h tonight", "by": "ops",
                                        "pin": n % 40 == 0}, "operator", None))
    elif n % 20 == 10:
        items.append(("alert.acked", {"alert_id": n, "by": "ops", "title": "slow host", "note": "rebooted"},
                      "operator", None))
    return items


# ------------------------------------------------------------------ building big logs


def build(path: Path, n_events: int) -> None:
    """Append ticks (and a context.compacted every COMPACT_EVERY ticks) until n_events."""
    for suffix in ("", "-wal", "-shm", ".head"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    log = EventLog(path)
    summary = "## Fleet state and commitments\n" + _text(1, 900)
    n, total = 0, 0
    tick_starts: list[int] = []
    pinned = empty_pinned()
    pending: list[Any] = []
    active: list[int] = []
    while total < n_events:
        with log.transaction() as tx:
            for _ in range(400):
                n += 1
                for item in tick_items(n):
                    e = tx.append(*item)
                    pending.append(e)
                    if e.kind == "tick.started":
                        tick_starts.append(e.seq)
                    elif e.kind == "operator.note" and e.payload.get("pin"):
                        active.append(e.seq)
                        if len(active) > ACTIVE_DIRECTIVES:  # operators retire old orders
                            pending.append(tx.append("directive.unpinned",
                                                     {"directive_id": active.pop(0), "by": "ops"}, "operator", None))
                if n % COMPACT_EVERY == 0 and len(tick_starts) > 4:
                    keep = tick_starts[-3]
                    pinned = fold_pinned(pinned, [e for e in pending if e.seq < keep])
                    pending = [e for e in pending if e.seq >= keep]
                    tx.append("context.compacted", {
                        "summary": summary, "covered_from": 1, "covered_to": keep - 1, "first_kept_seq": keep,
                        "tokens_before": 24000, "tokens_after": 12000, "method": "fallback", "model": None,
                        "prompt_hash": "bench", "pinned": pinned, "attempts": []}, "system", n)
                total = tx._seq
                if total >= n_events:
                    break
    log.close()


def cached_log(n_events: int) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"context-{n_events}.db"
    marker = CACHE / f"context-{n_events}.ok"
    if not marker.exists():
        subprocess.run([sys.executable, __file__, "--build", str(n_events), str(path)], check=True)
        marker.write_text("ok")
    return path


# ------------------------------------------------------------------ measurements


def p50_ms(fn: Any, runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 3)


def naive_replay(log: EventLog) -> int:
    n = 0
    for e in log.read(0):
        if render(e) is not None:
            n += 1
    return n


def speed(sizes: list[int], prompts: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sizes:
        log = EventLog(cached_log(size), readonly=True)
        ours = p50_ms(lambda log=log: project(log, prompts, SETTINGS, policy=POLICY, tools=TOOLS), 21)
        replay_runs = 3 if size <= 100_000 else 1
        t = time.perf_counter()
        for _ in range(replay_runs):
            naive_replay(log)
        naive = round((time.perf_counter() - t) * 1000 / replay_runs, 1)
        out[str(size)] = {"project_ms_p50": ours, "naive_replay_ms": naive, "speedup": round(naive / ours, 1),
                          "events": log.last_seq()}
        log.close()
    return out


def _prefix_tokens(tok: Any, prev: list[dict[str, Any]], cur: list[dict[str, Any]]) -> int:
    n = 3
    for a, b in zip(prev, cur, strict=False):
        if a != b:
            break
        n += tok.count_message(a)
    return n


def _window(system: dict[str, Any], msgs: list[dict[str, Any]], *, last: int | None = None,
            budget: int | None = None, tok: Any = None) -> list[dict[str, Any]]:
    if last is not None:
        return [system, *msgs[-last:]]
    kept: list[dict[str, Any]] = []
    used = tok.count_message(system) + 3
    for m in reversed(msgs):
        c = tok.count_message(m)
        if used + c > budget:
            break
        kept.append(m)
        used += c
    return [system, *reversed(kept)]


def conversation(ticks: int, prefix_ticks: int, directives: int, prompts: Any, path: Path) -> dict[str, Any]:
    """Run the real loop (fallback summariser) and score ours against two sliding windows."""
    for suffix in ("", "-wal", "-shm", ".head"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    log = EventLog(path)
    tok = log.tokenizer
    limit = SETTINGS.budget_tokens - SETTINGS.output_reserve
    plant_every = max(1, ticks // directives)
    planted: list[str] = []
    visible: list[dict[str, Any]] = []
    shares: dict[str, list[float]] = {"ours": [], "last_8_events": [], "newest_first_fill": []}
    prev: dict[str, list[dict[str, Any]]] = {}
    over_budget = 0
    reqs: dict[str, list[dict[str, Any]]] = {}
    requests = 0
    for n in range(1, ticks + 1):
        items = tick_items(n)
        first = items[:1]
        if n % plant_every == 0 and len(planted) < directives:
            text = f"directive {len(planted)}: never rent hosts in region R{len(planted)}"
            first.append(("operator.note", {"text": text, "by": "ops", "pin": True}, "operator", None))
            planted.append(text)
        # Like a real tick: a request after the observation, another after the tool results.
        for part, ask in ((first, True), (items[1:6], True), (items[6:], False)):
            for e in log.append_many(part):
                m = render(e)
                if m is not None:
                    visible.append(m)
            if not ask:
                continue
            compact(log, prompts, SETTINGS, policy=POLICY, tools=TOOLS, summarizer=None, tick=n,
                    open_alert_ids=[], owned_instance_ids=[20000 + i for i in range(8)])
            p = project(log, prompts, SETTINGS, policy=POLICY, tools=TOOLS, model="bench")
            over_budget += p.calibrated_tokens > limit
            log.append("model.request", request_payload(p), "system", n)
            requests += 1
            system = p.messages[0]
            reqs = {"ours": p.messages, "last_8_events": _window(system, visible, last=8),
                    "newest_first_fill": _window(system, visible, budget=limit - 400, tok=tok)}
            if n <= prefix_ticks:
                for k, msgs in reqs.items():
                    if k in prev:
                        shares[k].append(_prefix_tokens(tok, prev[k], msgs) / tok.count_messages(msgs))
                    prev[k] = msgs
    final = {k: "\n".join(m.get("content") or "" for m in msgs) for k, msgs in reqs.items()}
    comps = list(log.read(0, kinds=["context.compacted"]))
    sizes = [tok.count(c.payload["summary"]) for c in comps]
    log.close()
    return {
        "ticks": ticks,
        "requests": requests,
        "prefix_reuse": {k: round(statistics.mean(v), 4) for k, v in shares.items() if v},
        "prefix_ticks": prefix_ticks,
        "directive_retention": {k: round(sum(t in text for t in planted) / max(1, len(planted)), 4)
                                for k, text in final.items()},
        "directives_planted": len(planted),
        "compactions_per_100_ticks": round(100 * len(comps) / ticks, 2),
        "summary_tokens": {"mean": round(statistics.mean(sizes), 1) if sizes else 0, "max": max(sizes, default=0)},
        "requests_over_budget": over_budget,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    ap.add_argument("--build", nargs=2, metavar=("N", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING + 10))
    if args.build:
        build(Path(args.build[1]), int(args.build[0]))
        return
    prompts = load_prompts(None)
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000]
    t0 = time.perf_counter()
    result: dict[str, Any] = {"quick": args.quick, "budget_tokens": SETTINGS.budget_tokens}
    result["projection"] = speed(sizes, prompts)
    result["peak_rss_mb_after_largest"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    result["largest_events"] = sizes[-1]
    conv = CACHE / f"conversation-{os.getpid()}.db"
    CACHE.mkdir(parents=True, exist_ok=True)
    ticks, prefix_ticks, directives = (120, 60, 10) if args.quick else (2000, 500, 50)
    try:
        result["conversation"] = conversation(ticks, prefix_ticks, directives, prompts, conv)
    finally:
        for suffix in ("", "-wal", "-shm", ".head"):
            Path(str(conv) + suffix).unlink(missing_ok=True)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
