"""Benchmark the context projection; prints ONE JSON object.

    python bench/context.py            # full run (builds up to 10^6 events once, cached under /tmp)
    python bench/context.py --quick    # seconds-long smoke run

Figures:
- project_ms_p50 at 10^3..10^6 events (wall and CPU; warm token-count cache, as in a
  daemon, and cold), at every tick end of one compaction cycle, next to a naive
  full replay (read and render every event from seq 1; past 10^5 events it is
  timed on the first 10^5 and scaled when the whole would take over 10 minutes,
  and the JSON says so);
- prefix_reuse: share of each request's tokens that is an exact prefix of the
  previous request, ours vs a "last 8 events" window and a "newest-first fill
  to the token budget" window;
- directive_retention of directives planted over many ticks (ours vs baselines);
- compactions per 100 ticks and summary sizes (fallback summariser: deterministic);
- RSS after projecting each log, before any replay;
- ``flood``: real ticks with 3,000 knowledge files added at once, then deleted
  (``--flood N`` runs only this): the largest request and each tick's time;
- ``cache`` (``--cache TICKS`` runs only this): the real loop with 3 model calls per tick, ~1,500 tokens of
  new input per tick and a summariser that answers (continuing the agent's request), counting prompt
  prefix reuse by tokens (tool schemas included; a call reuses the previous call's prefix) over every call,
  the summariser's included, beside the seeds' baselines (last 8 events, last 20 rounds, newest-first fill);
  run with and without masking old tool outputs: compactions per 1,000 ticks and summariser tokens;
- ``aims``: each figure against the aim of the context design.

Synthetic logs are shaped like real ticks (~1,500 tokens each: an observation,
two tool calls and results, a short answer; an operator note or ack every ~20
ticks; tool outputs drawn from a bounded set of texts). Big logs are built once
through ``EventLog.append_many`` (hash chain, full-text index, read models and
token counts as a daemon writes them) in 5,000-event transactions, with a
``context.compacted`` every few ticks as a running daemon would leave them, and
cached under /tmp/fleet-agent-bench by size and shape.
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
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog  # noqa: E402

from agent.context import (  # noqa: E402
    PINNED_KINDS,
    ContextSettings,
    ProjectionCache,
    empty_pinned,
    fold_pinned,
    project,
    request_payload,
)
from agent.context.compaction import compact  # noqa: E402
from agent.context.prompts import load_prompts  # noqa: E402
from agent.events import Event, render  # noqa: E402
from agent.store.log import EventLog  # noqa: E402
from agent.tokens import REQUEST_OVERHEAD  # noqa: E402

CACHE = Path("/tmp/fleet-agent-bench")
POLICY = {"max_instances": 8, "max_dph": 0.6, "allowed_gpus": ["RTX_4090", "A100"], "image": "prover:1.4"}
TOOLS = [{"type": "function", "function": {"name": n, "description": f"{n} tool",
                                           "parameters": {"type": "object", "properties": {}}}}
         for n in ("search_offers", "rent_offer", "destroy_instance", "reboot_instance", "read_logs",
                   "raise_alert", "remember", "forget", "search_history", "read_knowledge")]
SETTINGS = ContextSettings()
COMPACT_EVERY = 10  # ticks between synthetic compactions in the big logs
ACTIVE_DIRECTIVES = 10  # standing directives alive at once in the big logs
Item = tuple[str, dict[str, Any], str, "int | None"]

WORDS = ("offer host gpu RTX_4090 A100 dph reliability verified disk inet_down cuda driver 535 proof queue "
         "pending running latency ok error timeout status loading exited image label").split()
TEXT_VARIANTS = 64  # distinct tool outputs the synthetic ticks draw from (realistic text, bounded set)
BATCH = 5000        # events per transaction when building big logs (one commit, one fsync per batch)
SHAPE = f"v2-c{COMPACT_EVERY}-d{ACTIVE_DIRECTIVES}-t{TEXT_VARIANTS}"  # cache key: change when ticks change


@lru_cache(maxsize=TEXT_VARIANTS * 2 + 8)
def _text_variant(v: int, k: int) -> str:
    return " ".join(f"{WORDS[(v * 31 + i * 7) % len(WORDS)]}{(v + i) % 97}" for i in range(k))


def _text(n: int, k: int) -> str:
    return _text_variant(n % TEXT_VARIANTS, k)


def tick_items(n: int) -> list[Item]:
    """One synthetic tick (~1,500 tokens of model-visible text)."""
    obs = {"time": 1_795_000_000 + n * 300, "balance": 5000.0 - n * 0.01,
           "instances": [{"id": 20000 + i, "gpu_name": "RTX_4090", "num_gpus": 1, "status": "running",
                          "age_s": 3600 + n * 300, "dph": 0.38 + i / 100, "host_id": 100 + i} for i in range(8)],
           "demand": {"pending": 10 + n % 17, "running": 8, "completed": 40 * n, "arrival_rate_per_h": 120.0}}
    calls = [{"id": f"call_{n}_0", "name": "search_offers", "arguments": json.dumps({"gpu": "RTX_4090", "limit": 5})},
             {"id": f"call_{n}_1", "name": "read_logs", "arguments": json.dumps({"instance_id": 20000 + n % 8})}]
    items: list[Item] = [
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


def synthetic_items(n_events: int) -> Iterator[Item]:
    """The items of a log of ``n_events`` events, as a running daemon would leave it: ticks, operator notes
    and withdrawals, and a ``context.compacted`` every COMPACT_EVERY ticks (keeping the newest three ticks,
    carrying the pinned snapshot folded from the events it covers)."""
    summary = "## Fleet state and commitments\n" + _text(1, 900)
    seq, n = 0, 0
    tick_starts: list[int] = []
    pinned = empty_pinned()
    pending: list[Event] = []   # pinned-kind events not yet folded into a compaction's snapshot
    active: list[int] = []

    def item(kind: str, payload: dict[str, Any], source: str, tick: int | None) -> Item:
        nonlocal seq
        seq += 1
        if kind in PINNED_KINDS:
            pending.append(Event(seq=seq, id="", ts="", kind=kind, source=source, tick=tick, payload=payload))
        return kind, payload, source, tick

    while seq < n_events:
        n += 1
        for kind, payload, source, tick in tick_items(n):
            if kind == "tick.started":
                tick_starts.append(seq + 1)
            yield item(kind, payload, source, tick)
            if kind == "operator.note" and payload.get("pin"):
                active.append(seq)
                if len(active) > ACTIVE_DIRECTIVES:  # operators retire old orders
                    yield item("directive.unpinned", {"directive_id": active.pop(0), "by": "ops"}, "operator", None)
            if seq >= n_events:
                return
        if n % COMPACT_EVERY == 0 and len(tick_starts) > 4:
            keep = tick_starts[-3]
            pinned = fold_pinned(pinned, [e for e in pending if e.seq < keep])
            pending = [e for e in pending if e.seq >= keep]
            yield item("context.compacted", {
                "summary": summary, "covered_from": 1, "covered_to": keep - 1, "first_kept_seq": keep,
                "tokens_before": 24000, "tokens_after": 12000, "method": "fallback", "model": None,
                "prompt_hash": "bench", "pinned": pinned, "attempts": []}, "system", n)


def build(path: Path, n_events: int) -> None:
    """Append ``synthetic_items`` through ``EventLog.append_many`` (hash chain, FTS, read models and
    token counts exactly as a daemon writes them), BATCH events per transaction."""
    for suffix in ("", "-wal", "-shm", ".head"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    log = EventLog(path)
    batch: list[Item] = []
    done, t0 = 0, time.perf_counter()
    for it in synthetic_items(n_events):
        batch.append(it)
        if len(batch) >= BATCH:
            done += len(log.append_many(batch))
            batch = []
            if done % 100_000 == 0:
                print(f"built {done} events in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    if batch:
        done += len(log.append_many(batch))
    assert log.last_seq() == done == n_events, (log.last_seq(), done, n_events)
    log.close()


def cached_log(n_events: int) -> Path:
    """The built log of ``n_events`` events of the current SHAPE, built once (in a child process)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"context-{n_events}-{SHAPE}.db"
    marker = CACHE / f"context-{n_events}-{SHAPE}.ok"
    if not marker.exists():
        t = time.perf_counter()
        subprocess.run([sys.executable, __file__, "--build", str(n_events), str(path)], check=True)
        marker.write_text(json.dumps({"build_s": round(time.perf_counter() - t, 1)}))
    return path


# ------------------------------------------------------------------ measurements


def _rss_mb() -> dict[str, float]:
    status = Path("/proc/self/status").read_text()
    now = next((int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:")), 0)
    return {"rss_mb": round(now / 1024, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def cycle_ends(log: EventLog) -> list[int]:
    """The seqs ending the newest COMPACT_EVERY ticks: one whole compaction cycle, so the figures do not
    depend on where in the cycle a log happens to stop."""
    return sorted(e.seq for e in log.read(0, kinds=["tick.completed"], newest_first=True, limit=COMPACT_EVERY))


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(t: tuple[float, float]) -> tuple[float, float]:
    """(wall ms, this process's CPU ms) since ``t``: on a shared machine the CPU figure is the steadier."""
    return (time.perf_counter() - t[0]) * 1000, (time.process_time() - t[1]) * 1000


def _p50(xs: list[float]) -> float:
    return round(statistics.median(xs), 3)


def projection_times(log: EventLog, prompts: Any, runs: int) -> dict[str, Any]:
    """p50 of ``project`` at every position of one compaction cycle: warm (the token-count cache holds the
    thread's counts, as in a daemon that projects several times per tick) and cold (cache emptied first)."""
    warm: list[tuple[float, float]] = []
    cold: list[tuple[float, float]] = []
    thread: list[int] = []
    cache = ProjectionCache()
    for end in cycle_ends(log):
        def run(end: int = end) -> Any:
            return project(log, prompts, SETTINGS, policy=POLICY, tools=TOOLS, until_seq=end, cache=cache)
        for _ in range(runs):
            cache.clear()
            t = _clock()
            p = run()
            cold.append(_since(t))
            t = _clock()
            run()
            warm.append(_since(t))
        thread.append(p.manifest["thread_events"])
    return {"project_ms_p50": _p50([w for w, _ in warm]), "project_cpu_ms_p50": _p50([c for _, c in warm]),
            "project_cold_ms_p50": _p50([w for w, _ in cold]), "project_cold_cpu_ms_p50": _p50([c for _, c in cold]),
            "positions": len(thread), "thread_messages": [min(thread), max(thread)]}


def naive_replay(log: EventLog, cap_s: float) -> dict[str, Any]:
    """Read and render every event from seq 1. Past 10^5 events, when the whole replay would take more
    than ``cap_s``, stop and scale the time of the events replayed so far."""
    total = log.last_seq()
    n = visible = 0
    t = _clock()
    for e in log.read(0):
        n += 1
        if render(e) is not None:
            visible += 1
        if n == 100_000 and n < total and _since(t)[0] * total / n > cap_s * 1000:
            wall, cpu = _since(t)
            return {"naive_replay_ms": round(wall * total / n, 1), "naive_replay_cpu_ms": round(cpu * total / n, 1),
                    "naive_replay": f"estimated: the first {n} events timed, scaled to {total}"}
    wall, cpu = _since(t)
    return {"naive_replay_ms": round(wall, 1), "naive_replay_cpu_ms": round(cpu, 1), "naive_replay": "full"}


def speed(sizes: list[int], prompts: Any, runs: int, replay_cap_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sizes:  # projections first, so the RSS figures are the projection's alone
        path = cached_log(size)
        log = EventLog(path, readonly=True)
        out[str(size)] = {"events": log.last_seq(), **projection_times(log, prompts, runs), **_rss_mb()}
        log.close()
    for size in sizes:
        log = EventLog(cached_log(size), readonly=True)
        r = out[str(size)]
        r.update(naive_replay(log, replay_cap_s))
        r["speedup"] = round(r["naive_replay_ms"] / r["project_ms_p50"], 1)
        r["speedup_cpu"] = round(r["naive_replay_cpu_ms"] / r["project_cpu_ms_p50"], 1)
        r["speedup_cold_cpu"] = round(r["naive_replay_cpu_ms"] / r["project_cold_cpu_ms_p50"], 1)
        log.close()
    return out


class MessageTokens:
    """``Tokenizer.count_message``, remembered per message content (the windows recount the same messages)."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.memo: dict[tuple[Any, ...], int] = {}

    def __call__(self, m: dict[str, Any]) -> int:
        key = (m.get("role"), m.get("content"), m.get("tool_call_id"), repr(m.get("tool_calls")))
        n = self.memo.get(key)
        if n is None:
            n = self.memo[key] = self.tok.count_message(m)
        return n

    def request(self, msgs: list[dict[str, Any]]) -> int:
        return REQUEST_OVERHEAD + sum(self(m) for m in msgs)


def _prefix_tokens(count: MessageTokens, prev: list[dict[str, Any]], cur: list[dict[str, Any]]) -> int:
    """Tokens of ``cur`` (whole messages, plus the request overhead) that repeat ``prev`` from its start."""
    n = REQUEST_OVERHEAD
    for a, b in zip(prev, cur, strict=False):
        if a != b:
            break
        n += count(a)
    return n


def _window(system: dict[str, Any], msgs: list[dict[str, Any]], *, last: int | None = None,
            budget: int = 0, count: MessageTokens | None = None) -> list[dict[str, Any]]:
    """A baseline request: the newest ``last`` messages, or the newest that fit ``budget`` tokens."""
    if last is not None:
        return [system, *msgs[-last:]]
    assert count is not None
    kept: list[dict[str, Any]] = []
    used = count(system) + REQUEST_OVERHEAD
    for m in reversed(msgs):
        c = count(m)
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
    count = MessageTokens(tok)
    cache = ProjectionCache()
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
                    open_alert_ids=[], owned_instance_ids=[20000 + i for i in range(8)], cache=cache)
            p = project(log, prompts, SETTINGS, policy=POLICY, tools=TOOLS, model="bench", cache=cache)
            over_budget += p.calibrated_tokens > limit
            log.append("model.request", request_payload(p), "system", n)
            requests += 1
            if n > prefix_ticks and n < ticks:
                continue
            system = p.messages[0]
            reqs = {"ours": p.messages, "last_8_events": _window(system, visible, last=8),
                    "newest_first_fill": _window(system, visible, budget=limit - 400, count=count)}
            if n <= prefix_ticks:
                for k, msgs in reqs.items():
                    if k in prev:
                        shares[k].append(_prefix_tokens(count, prev[k], msgs) / count.request(msgs))
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


# ------------------------------------------------------------------ prompt cache reuse (3 calls per tick)


def cache_tick_items(n: int) -> list[list[Item]]:
    """One tick in three parts, one model call after each: the observation; a search result; a log read.
    About 1,500 tokens of new model-visible input per tick."""
    obs = {"time": 1_795_000_000 + n * 300, "balance": 5000.0 - n * 0.01,
           "instances": [{"id": 20000 + i, "gpu_name": "RTX_4090", "num_gpus": 1, "status": "running",
                          "age_s": 3600 + n * 300, "dph": 0.38 + i / 100, "host_id": 100 + i} for i in range(8)],
           "demand": {"pending": 10 + n % 17, "running": 8, "completed": 40 * n, "arrival_rate_per_h": 120.0}}
    c1 = {"id": f"call_{n}_0", "name": "search_offers", "arguments": json.dumps({"gpu": "RTX_4090", "limit": 5})}
    c2 = {"id": f"call_{n}_1", "name": "read_logs", "arguments": json.dumps({"instance_id": 20000 + n % 8})}
    first: list[Item] = [("tick.started", {"observation": obs}, "scheduler", n)]
    if n % 20 == 0:
        first.append(("operator.note", {"text": f"note {n}: keep spend under $4/h tonight", "by": "ops",
                                        "pin": n % 40 == 0}, "operator", None))
    elif n % 20 == 10:
        first.append(("alert.acked", {"alert_id": n, "by": "ops", "title": "slow host", "note": "rebooted"},
                      "operator", None))
    second: list[Item] = [("model.response", {"text": "", "tool_calls": [c1]}, "model", n),
                          ("tool.called", {"call_id": c1["id"], "name": c1["name"], "arguments": c1["arguments"]},
                           "tool", n),
                          ("tool.result", {"call_id": c1["id"], "name": c1["name"], "ok": True,
                                           "output": _text(n, 240)}, "tool", n)]
    third: list[Item] = [("model.response", {"text": "", "tool_calls": [c2]}, "model", n),
                         ("tool.called", {"call_id": c2["id"], "name": c2["name"], "arguments": c2["arguments"]},
                          "tool", n),
                         ("tool.result", {"call_id": c2["id"], "name": c2["name"], "ok": True,
                                          "output": _text(n + 1, 240)}, "tool", n)]
    return [first, second, third]


class BenchSummariser:
    """A summariser that does its job (every section; every alert, instance, directive and operator input
    its request names) and records each call, as a provider would see it. ``lines``: that many more lines
    of completed actions (about 17 tokens each), for a summary of the size a model writes."""

    def __init__(self, lines: int = 0) -> None:
        self.calls: list[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = []
        self.replies: list[str] = []
        self.lines = lines

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        import re

        from agent.model.llm import ModelReply

        self.calls.append((messages, tools))
        ask = next((str(m["content"]) for m in reversed(messages) if "Open alerts to mention:" in
                    str(m.get("content") or "")), "")
        want = {ln.split(":", 1)[0]: ln.split(":", 1)[1] for ln in ask.splitlines() if ":" in ln}

        def nums(key: str) -> list[str]:   # every line the request names for it (inputs: folded and cited before)
            return [n for k, v in want.items() if k.startswith(key) for n in re.findall(r"\d+", v)]

        text = ("## Fleet state and commitments\n- instances " + ", ".join(nums("Instances")) + "\n"
                "## Decisions and why\n- held the fleet steady: no offer beats the current hosts\n"
                "## Open problems\n- " + (", ".join(f"alert #{a}" for a in nums("Open alerts")) or "none") + "\n"
                "## Operator directives\n- " + (", ".join(f"#{d}" for d in nums("Pinned")
                                                          + nums("Operator inputs")) or "none") + "\n"
                "## Completed actions\n- searched offers and read logs each tick")
        text += "".join(f"\n- round {k}: compared the offers with the hosts in use and kept them" for k in range(self.lines))
        self.replies.append(text)
        return ModelReply(text=text)


def _reuse(count: MessageTokens, tools_tokens: int, prev: tuple[list[dict[str, Any]], bool] | None,
           cur: list[dict[str, Any]], with_tools: bool) -> tuple[int, int]:
    """(prefix tokens reused from the previous call, tokens of this call): tool schemas come first in the
    prompt, so a call whose tools differ from the previous call's reuses nothing."""
    total = count.request(cur) + (tools_tokens if with_tools else 0)
    if prev is None or prev[1] != with_tools:
        return 0, total
    return _prefix_tokens(count, prev[0], cur) + (tools_tokens if with_tools else 0), total


def _rounds(msgs: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """The newest ``rounds`` rounds (each starts at an assistant message) and what follows them."""
    starts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"]
    if len(starts) < rounds:
        return msgs
    return msgs[starts[-rounds]:]


def cache_run(ticks: int, prompts: Any, path: Path, mask_after_ticks: int) -> dict[str, Any]:
    """The real loop over ``ticks`` ticks with 3 calls each and an answering summariser; prompt prefix
    reuse by tokens over every call, ours and the baselines'."""
    from dataclasses import replace

    for suffix in ("", "-wal", "-shm", ".head"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    settings = replace(SETTINGS, mask_after_ticks=mask_after_ticks)
    log = EventLog(path)
    count = MessageTokens(log.tokenizer)
    tools_tokens = log.tokenizer.count_tools(TOOLS)
    cache = ProjectionCache()
    summariser = BenchSummariser()
    limit = settings.budget_tokens - settings.output_reserve
    visible: list[dict[str, Any]] = []
    sums = {k: [0, 0] for k in ("ours", "ours_agent_calls", "last_8_events", "last_20_rounds", "newest_first_fill")}
    prev: dict[str, tuple[list[dict[str, Any]], bool] | None] = {k: None for k in sums}
    summary_tokens = {"prompt": 0, "output": 0}
    over = 0

    def score(key: str, msgs: list[dict[str, Any]], with_tools: bool = True) -> None:
        reused, total = _reuse(count, tools_tokens, prev[key], msgs, with_tools)
        sums[key][0] += reused
        sums[key][1] += total
        prev[key] = (msgs, with_tools)

    for n in range(1, ticks + 1):
        for part in cache_tick_items(n):
            for e in log.append_many(part):
                m = render(e)
                if m is not None:
                    visible.append(m)
            seen, since = len(summariser.calls), log.last_seq()
            compact(log, prompts, settings, policy=POLICY, tools=TOOLS, summarizer=summariser, tick=n,
                    open_alert_ids=[], owned_instance_ids=[20000 + i for i in range(8)], cache=cache,
                    model_name="bench")
            for msgs, tools in summariser.calls[seen:]:
                score("ours", msgs, bool(tools))
                summary_tokens["prompt"] += count.request(msgs) + (tools_tokens if tools else 0)
            for c in log.read(since, kinds=["summary.response"]):
                summary_tokens["output"] += count.tok.count(c.payload.get("text") or "")
            p = project(log, prompts, settings, policy=POLICY, tools=TOOLS, model="bench", cache=cache)
            over += p.calibrated_tokens > limit
            req = log.append("model.request", request_payload(p), "system", n)
            log.append("model.response", {"text": "ok", "tool_calls": [], "request_seq": req.seq}, "model", n)
            score("ours", p.messages)
            score("ours_agent_calls", p.messages)
            system = p.messages[0]
            score("last_8_events", _window(system, visible, last=8))
            score("last_20_rounds", [system, *_rounds(visible, 20)])
            score("newest_first_fill", _window(system, visible, budget=limit - 400, count=count))
    comps = [e.payload for e in log.read(0, kinds=["context.compacted"])]
    log.close()
    per_k = 1000 / ticks
    return {
        "ticks": ticks, "mask_after_ticks": mask_after_ticks,
        "model_calls": {"agent": 3 * ticks, "summariser": len(summariser.calls)},
        "prefix_reuse_by_tokens": {k: round(a / b, 4) for k, (a, b) in sums.items() if b},
        "prompt_tokens": {k: b for k, (a, b) in sums.items()},
        "compactions_per_1000_ticks": round(per_k * len(comps), 1),
        "summarising_compactions_per_1000_ticks": round(per_k * sum(1 for c in comps if c["method"] != "masked"), 1),
        "methods": {m: sum(1 for c in comps if c["method"] == m) for m in sorted({c["method"] for c in comps})},
        "summariser_tokens_per_1000_ticks": {k: round(per_k * v) for k, v in summary_tokens.items()},
        "continuation_calls": sum(1 for _, t in summariser.calls if t),
        "requests_over_budget": over,
        "new_input_tokens_per_tick": round(sum(count(m) for m in visible) / ticks),
    }


# ---- $/day (agent.price): a run's prompt tokens, the reused prefix as cached, priced at a hosted sheet
def usd_per_day(run: dict[str, Any], preset: str = "gpt-4.1", tick_seconds: float = 300) -> dict[str, Any]:
    """The bill of ``run`` (``cache_run``'s result) a day at one tick every ``tick_seconds``."""
    from agent.price import PRESETS, Price, daily_cost

    i, c, o, sheet = PRESETS[preset]
    total = run["prompt_tokens"]["ours"]
    usage = {"prompt_tokens": total, "cached_tokens": round(total * run["prefix_reuse_by_tokens"]["ours"]),
             "completion_tokens": run["summariser_tokens_per_1000_ticks"]["output"] * run["ticks"] // 1000
             + run["model_calls"]["agent"]}  # the bench's agent replies are one token ("ok")
    d = daily_cost(Price(i, c, o, sheet), usage, run["ticks"], tick_seconds)
    return {"preset": preset, "sheet": sheet, "usd_per_tick": round(d["per_tick"], 5),
            "usd_per_day": round(d["per_day"], 2)}
# ---- end $/day


def cache_scenario(ticks: int, prompts: Any) -> dict[str, Any]:
    """``cache_run`` with masking (the default K) and without it."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"cache-{os.getpid()}.db"
    try:
        masked = cache_run(ticks, prompts, path, SETTINGS.mask_after_ticks)
        unmasked = cache_run(ticks, prompts, path, 0)
    finally:
        for suffix in ("", "-wal", "-shm", ".head"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    return {"with_masking": masked, "without_masking": unmasked,
            "aim_prefix_reuse_ge_0.95": masked["prefix_reuse_by_tokens"]["ours"] >= 0.95,
            "dollars": {"with_masking": usd_per_day(masked), "without_masking": usd_per_day(unmasked)}}


# ------------------------------------------------------------------ fleets of 10, 100 and 500 instances


FLEET_GPUS = (("RTX_4090", 0.38), ("A100", 1.10), ("RTX_3090", 0.22))


def fleet_observation(n: int, size: int) -> dict[str, Any]:
    """A fleet of ``size`` instances as a tick observes it: eight-digit ids, three GPU models, four instances
    to a host (rented together, so of one age), one instance in trouble every 50, ages growing tick by tick."""
    insts = []
    for i in range(size):
        gpu, dph = FLEET_GPUS[i // 4 % len(FLEET_GPUS)]
        bad = i % 50 == 7
        insts.append({"id": 10_000_000 + 37 * i, "gpu_name": gpu, "num_gpus": 1,
                      "status": "loading" if bad else "running", "age_s": 3600 * (1 + i // 4 % 5) + n * 300,
                      "dph": dph, "host_id": 1000 + i // 4,
                      **({"status_msg": "cuda error: device unavailable"} if bad else {})})
    return {"time": 1_795_000_000 + n * 300, "balance": 50_000.0 - n * size * 0.004, "instances": insts,
            "fleet_dph": round(sum(i["dph"] for i in insts), 2),
            "demand": {"pending": 10 + n % 17, "running": size, "completed": 40 * n, "arrival_rate_per_h": 120.0}}


def fleet_owned(size: int) -> list[int]:
    return [10_000_000 + 37 * i for i in range(size)]


def fleet_tick_items(n: int, size: int) -> list[list[Item]]:
    """``cache_tick_items`` with the observation of a ``size``-instance fleet."""
    parts = cache_tick_items(n)
    kind, _, source, tick = parts[0][0]
    parts[0][0] = (kind, {"observation": fleet_observation(n, size)}, source, tick)
    return parts


def fleet_run(size: int, ticks: int, prompts: Any, path: Path, settings: ContextSettings = SETTINGS,
              summary_lines: int = 0) -> dict[str, Any]:
    """The real loop (compaction, projection) over ``ticks`` ticks of a ``size``-instance fleet, 3 agent calls a
    tick with the project's real tool specs, and an answering summariser: per tick, the prompt tokens of every
    call (the summariser's included) and how many of them repeat the previous call's prefix (what a provider's
    prompt cache serves); the reuse of the first agent call after each compaction; compactions and summaries."""
    from agent.fleet.toolkit import load_tools

    for suffix in ("", "-wal", "-shm", ".head"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    tools = load_tools().specs()
    log = EventLog(path)
    count = MessageTokens(log.tokenizer)
    tools_tokens = log.tokenizer.count_tools(tools)
    cache = ProjectionCache()
    summariser = BenchSummariser(summary_lines)
    owned = fleet_owned(size)
    prev: tuple[list[dict[str, Any]], bool] | None = None
    reused = total = fresh = 0   # fresh: tokens of the tick's own new messages, which no cache can hold
    completion = 0               # the agent's one-token answers and the summaries written
    after: list[float] = []
    heads: list[float] = []   # share of the first call after a compaction that is its stable head
    stacked: list[float] = []  # the same were the summary before it kept byte for byte (stacked summaries)
    kept_ticks: list[int] = []  # ticks whose messages the first call after a compaction keeps word for word
    last_summary = 0           # tokens of the summary message of the call before
    sizes_after: list[int] = []  # tokens of the first call after a compaction, tool schemas included

    def score(msgs: list[dict[str, Any]], with_tools: bool) -> float:
        nonlocal prev, reused, total
        r, t = _reuse(count, tools_tokens, prev, msgs, with_tools)
        reused += r
        total += t
        prev = (msgs, with_tools)
        return r / t

    t0 = time.perf_counter()
    for n in range(1, ticks + 1):
        for part in fleet_tick_items(n, size):
            for e in log.append_many(part):
                m = render(e)
                fresh += count(m) if m is not None else 0
            seen = len(summariser.calls)
            comp = compact(log, prompts, settings, policy=POLICY, tools=tools, summarizer=summariser, tick=n,
                           open_alert_ids=[], owned_instance_ids=owned, cache=cache, model_name="bench")
            for msgs, sent in summariser.calls[seen:]:
                score(msgs, bool(sent))
            p = project(log, prompts, settings, policy=POLICY, tools=tools, model="bench", cache=cache)
            req = log.append("model.request", request_payload(p), "system", n)
            log.append("model.response", {"text": "ok", "tool_calls": [], "request_seq": req.seq}, "model", n)
            completion += 1
            share = score(p.messages, True)
            if comp is not None:
                after.append(share)
                # the most any prefix cache could serve of this call: tools, system prompt and pinned block come
                # through a compaction unchanged; the summary after them is new, so nothing past it matches
                head = 2 if p.sections.get("pinned") else 1
                head_tokens = count.request(p.messages[:head]) + tools_tokens
                whole = count.request(p.messages) + tools_tokens
                heads.append(head_tokens / whole)
                sizes_after.append(whole)
                # were every earlier summary kept byte for byte ahead of the new one, it would join the head (and
                # the request): the most a stacked layout could serve of this call
                stacked.append((head_tokens + last_summary) / (whole + last_summary))
                kept_ticks.append(sum(1 for _ in log.read(p.manifest["covered_to"], until_seq=p.manifest["thread_to"],
                                                          kinds=["tick.started"])))
            last_summary = p.sections.get("summary") or 0
    comps = [e.payload for e in log.read(0, kinds=["context.compacted"])]
    completion += sum(count.tok.count(t) for t in summariser.replies)
    log.close()
    summarised = [c for c in comps if c.get("summarised", True)]
    return {
        "instances": size, "ticks": ticks, "low_water": settings.low_water,
        "prompt_tokens_per_tick": round(total / ticks),
        "cached_tokens_per_tick": round(reused / ticks),
        "uncached_tokens_per_tick": round((total - reused) / ticks),
        "new_input_tokens_per_tick": round(fresh / ticks),
        "reuse_ceiling": round(1 - fresh / total, 4),   # were nothing but the new messages sent uncached
        "prefix_reuse_by_tokens": round(reused / total, 4),
        "reuse_after_compaction": round(statistics.mean(after), 4) if after else None,
        "reuse_after_compaction_min": round(min(after), 4) if after else None,
        "stable_head_after_compaction": round(statistics.mean(heads), 4) if heads else None,
        "stacked_head_after_compaction": round(statistics.mean(stacked), 4) if stacked else None,
        "tokens_after_compaction": round(statistics.mean(sizes_after)) if sizes_after else None,
        "ticks_kept_after_compaction": round(statistics.mean(kept_ticks), 1) if kept_ticks else None,
        "ticks_kept_after_compaction_min": min(kept_ticks) if kept_ticks else None,
        "summary_tokens": round(statistics.mean(count.tok.count(t) for t in summariser.replies))
        if summariser.replies else None,
        "compactions": len(comps),
        "masking_only": sum(1 for c in comps if not c.get("summarised", True)),
        "summaries": len(summarised),
        "summaries_accepted": sum(1 for c in summarised if c["method"] == "llm"),
        "summariser_calls": len(summariser.calls),
        "usd": fleet_usd(total, reused, completion, ticks),
        "seconds": round(time.perf_counter() - t0, 1),
    }


def fleet_usd(prompt: int, cached: int, completion: int, ticks: int, preset: str = "gpt-4.1",
              tick_seconds: float = 300) -> dict[str, Any]:
    """A fleet run's bill at a hosted model's sheet (agent.price), the reused prefix priced as cached: per tick
    and per day at one tick every ``tick_seconds``."""
    from agent.price import PRESETS, Price, daily_cost

    i, c, o, sheet = PRESETS[preset]
    d = daily_cost(Price(i, c, o, sheet), {"prompt_tokens": prompt, "cached_tokens": cached,
                                           "completion_tokens": completion}, ticks, tick_seconds)
    return {"preset": preset, "usd_per_tick": round(d["per_tick"], 5), "usd_per_day": round(d["per_day"], 2)}


def fleet_scenario(sizes: list[int], ticks: int, prompts: Any, settings: ContextSettings = SETTINGS,
                   summary_lines: int = 0) -> dict[str, Any]:
    """``fleet_run`` at each fleet size, with each figure against its aim."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"fleet-{os.getpid()}.db"
    out: dict[str, Any] = {}
    try:
        for size in sizes:
            out[str(size)] = fleet_run(size, ticks, prompts, path, settings, summary_lines)
    finally:
        for suffix in ("", "-wal", "-shm", ".head"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    small, big = out.get("10"), out.get("500")
    out["aims"] = {
        **({"reuse_ge_0.97_at_10": small["prefix_reuse_by_tokens"] >= 0.97} if small else {}),
        **({"reuse_ge_0.93_at_500": big["prefix_reuse_by_tokens"] >= 0.93,
            "uncached_le_4k_per_tick_at_500": big["uncached_tokens_per_tick"] <= 4000} if big else {}),
        "reuse_after_compaction_ge_0.8": all((r["reuse_after_compaction"] or 1) >= 0.8 for k, r in out.items()
                                             if k != "aims"),
    }
    return out


def print_fleet(r: dict[str, Any]) -> None:
    """One line per fleet size (the JSON follows on the last line)."""
    for k, f in r.items():
        if k == "aims":
            continue
        print(f"instances {f['instances']:>4}  prompt/tick {f['prompt_tokens_per_tick']:>7,}  cached "
              f"{f['cached_tokens_per_tick']:>7,}  uncached {f['uncached_tokens_per_tick']:>6,}  reuse "
              f"{f['prefix_reuse_by_tokens']:.4f} (ceiling {f['reuse_ceiling']:.4f}, new input "
              f"{f['new_input_tokens_per_tick']:,}/tick)  after compaction {f['reuse_after_compaction']} (stable head "
              f"{f['stable_head_after_compaction']}, stacked {f['stacked_head_after_compaction']}; ticks kept "
              f"{f['ticks_kept_after_compaction']}, min {f['ticks_kept_after_compaction_min']})  compactions "
              f"{f['compactions']} (masking only {f['masking_only']})  summaries accepted "
              f"{f['summaries_accepted']}/{f['summaries']}  ${f['usd']['usd_per_day']:,.2f}/day at "
              f"{f['usd']['preset']} (a tick every 5 min)", file=sys.stderr)


def aims(r: dict[str, Any]) -> dict[str, Any]:
    """Each measured figure next to its aim."""
    proj = r["projection"]
    big = proj[str(r["largest_events"])]
    small = proj[min(proj, key=int)]
    conv = r["conversation"]
    return {
        "project_ms_p50_le_10_at_largest": big["project_ms_p50"] <= 10,
        "project_cpu_ms_p50_le_10_at_largest": big["project_cpu_ms_p50"] <= 10,
        "flat_cpu_ratio_largest_to_smallest": round(big["project_cpu_ms_p50"] / small["project_cpu_ms_p50"], 2),
        "speedup_ge_100_at_largest": big["speedup"] >= 100,
        "speedup_cpu_ge_100_at_largest": big["speedup_cpu"] >= 100,
        "prefix_reuse_ge_0.9": conv["prefix_reuse"]["ours"] >= 0.9,
        "directive_retention_100pct": conv["directive_retention"]["ours"] == 1.0,
        "rss_le_150mb_at_largest": big["peak_rss_mb"] <= 150,
    }


def flood(files: int, budget: int = 30_000) -> dict[str, Any]:
    """Real ticks (simulator, rules provider) with ``files`` knowledge files added at once, left alone
    for a tick, then all deleted: the largest request (calibrated tokens) and each tick's wall time."""
    import tempfile

    from agent import config
    from agent.runtime.app import App
    from agent.runtime.demo import SIM_KEY, START, TICK_SECONDS, demo_config
    from agent.runtime.tick import run_tick
    from agent.sim import ManualClock, SimServer, Simulator

    root = Path(tempfile.mkdtemp(prefix="fleet-agent-flood-"))
    clock = ManualClock(START)
    server = SimServer(Simulator(seed=11, clock=clock, api_key=SIM_KEY)).start()
    kdir = root / "knowledge"
    kdir.mkdir()
    (root / "vast_api_key").write_text(SIM_KEY + "\n", encoding="utf-8")
    os.chmod(root / "vast_api_key", 0o600)
    cfg = root / "config.yaml"
    cfg.write_text(demo_config(root, server.url, model_url=None, model=None, budget=budget), encoding="utf-8")
    app = App(config.load(str(cfg)), clock=clock)
    app.init_database()   # only init creates a database
    past = time.time() - 60
    steps: list[tuple[str, Any]] = [("baseline", None), ("added", "add"), ("unchanged", None), ("removed", "rm"),
                                    ("after", None)]
    ticks: dict[str, float] = {}
    try:
        for label, action in steps:
            if action == "add":
                for i in range(files):
                    f = kdir / f"note-{i:05d}.md"
                    f.write_text(f"# note {i}\n- host {10_000 + i} is fine\n", encoding="utf-8")
                    os.utime(f, (past, past))
            elif action == "rm":
                for f in kdir.iterdir():
                    f.unlink()
            t = time.perf_counter()
            r = run_tick(app)
            ticks[label] = round(time.perf_counter() - t, 2)
            if not r.ok:
                ticks[label + "_failed"] = r.reason  # type: ignore[assignment]
            clock.advance(TICK_SECONDS)
        reqs = list(app.log.read(0, kinds=["model.request"]))
        return {"files": files, "budget_tokens": budget,
                "limit_tokens": budget - app.settings.context.output_reserve,
                "max_request_tokens": max(int(e.payload["manifest"]["calibrated_tokens"]) for e in reqs),
                "requests": len(reqs), "tick_s": ticks}
    finally:
        app.close()
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a seconds-long smoke run")
    ap.add_argument("--flood", type=int, metavar="FILES", help="only the flood scenario with FILES knowledge files")
    ap.add_argument("--cache", type=int, metavar="TICKS", help="only the prompt-cache scenario over TICKS ticks")
    ap.add_argument("--fleet", metavar="SIZES", help="only the fleet-size scenario at SIZES instances (e.g. 10,100,500)")
    ap.add_argument("--ticks", type=int, default=300, help="ticks per fleet size with --fleet (default 300)")
    ap.add_argument("--low-water", type=float, help="with --fleet: context.low_water (default: the default's)")
    ap.add_argument("--summary-lines", type=int, default=0,
                    help="with --fleet: the summariser writes this many more lines (~17 tokens each; default 0)")
    ap.add_argument("--build", nargs=2, metavar=("N", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING + 10))
    if args.build:
        build(Path(args.build[1]), int(args.build[0]))
        return
    if args.flood:
        print(json.dumps({"flood": flood(args.flood)}, sort_keys=True))
        return
    prompts = load_prompts(None)
    if args.cache:
        print(json.dumps({"cache": cache_scenario(args.cache, prompts)}, sort_keys=True))
        return
    if args.fleet:
        from dataclasses import replace

        fleet = fleet_scenario([int(x) for x in args.fleet.split(",")], args.ticks, prompts,
                               SETTINGS if args.low_water is None else replace(SETTINGS, low_water=args.low_water),
                               args.summary_lines)
        print_fleet(fleet)
        print(json.dumps({"fleet": fleet}, sort_keys=True))
        return
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000]
    t0 = time.perf_counter()
    load0 = [round(x, 2) for x in os.getloadavg()]
    result: dict[str, Any] = {"quick": args.quick, "settings": {k: getattr(SETTINGS, k) for k in (
        "budget_tokens", "output_reserve", "high_water", "low_water", "summary_max_tokens")}}
    result["projection"] = speed(sizes, prompts, 3 if args.quick else 5, 120.0 if args.quick else 600.0)
    result["largest_events"] = sizes[-1]
    result["loadavg_start"] = load0
    result["build_s"] = {str(n): json.loads((CACHE / f"context-{n}-{SHAPE}.ok").read_text()).get("build_s")
                         for n in sizes}
    conv = CACHE / f"conversation-{os.getpid()}.db"
    CACHE.mkdir(parents=True, exist_ok=True)
    ticks, prefix_ticks, directives = (120, 60, 10) if args.quick else (2000, 500, 50)
    try:
        result["conversation"] = conversation(ticks, prefix_ticks, directives, prompts, conv)
    finally:
        for suffix in ("", "-wal", "-shm", ".head"):
            Path(str(conv) + suffix).unlink(missing_ok=True)
    result["flood"] = flood(300 if args.quick else 3000)
    result["cache"] = cache_scenario(60 if args.quick else 600, prompts)
    result["aims"] = aims(result)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    result["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
