"""Operator commands for the model's context: `context` (what the model saw) and `replay`.

`context` prints exactly the messages of a request, as of now, a time, a tick's
last request or a seq, with per-section token counts. `replay` re-derives every
recorded `model.request` from the log and the prompt files and checks each
request hash; `--verify` stops at the first mismatch and says why.
"""

from __future__ import annotations

import argparse
import heapq
import json
from collections.abc import Iterator
from typing import Any

from agent.cli import args as args_
from agent.cli import output
from agent.cli.thread import not_before_first
from agent.context import meter_for
from agent.context.load import not_past_the_end
from agent.context.pinned import block_tokens
from agent.context.replay import ReplayResult, inspect_request, replay, replay_summaries, verify


def _out(s: str = "") -> None:
    output.out(s)


def _cache(app: Any) -> Any:
    return getattr(app, "projection_cache", None)


# ------------------------------------------------------------------ context


def _render_message(i: int, m: dict[str, Any], tokens: int) -> str:
    tag = m["role"] + (f" → {m['tool_call_id']}" if m.get("tool_call_id") else "")
    lines = [f"── [{i}] {tag} ({tokens} tokens)"]
    if m.get("content"):
        lines.append(m["content"])
    for c in m.get("tool_calls") or ():
        lines.append(f"→ {c['function']['name']}({c['function']['arguments']})  [{c['id']}]")
    return "\n".join(lines)


def _blocks(p: Any, settings: Any, app: Any) -> str:
    """Each memory block's tokens against its cap, as this request shows it."""
    texts = [str(m.get("content") or "") for m in p.messages[1:3] if m["role"] == "user"]
    pinned = next((t for t in texts if t.startswith("[pinned · ")), None)
    summary = next((t for t in texts if t.startswith("[summary of ")), None)
    used = block_tokens(pinned, summary, meter_for(settings, _cache(app)))
    caps = {"directives": settings.directives_max_tokens, "operator": settings.directives_max_tokens,
            "memory": settings.memory_max_tokens,
            "knowledge": settings.pinned_max_tokens, "facts": settings.facts_max_tokens}
    return " · ".join(f"{k} {used[k]:,}/{caps[k]:,}" for k in caps)


def cmd_context(args: argparse.Namespace, app: Any) -> int:
    settings = app.settings.context
    at = args_.parse_when(args.at) if args.at else None
    not_before_first(app, at, "--at")
    not_past_the_end(app.log, args.seq, "--seq")
    found = inspect_request(app.log, app.prompts, settings, policy=app.policy_dict(), tools=app.tool_specs(),
                    model=app.settings.model.name, at_ts=at, tick=args.tick, seq=args.seq, cache=_cache(app))
    p, recorded, match = found.projection, found.recorded, found.matches
    if args.json:
        _out(output.json_text({"messages": p.messages, "manifest": p.manifest, "tokens": p.tokens,
                         "sections": p.sections, "recorded_request_seq": recorded.seq if recorded else None,
                         "recorded_hash_matches": match, "inputs": found.inputs}, indent=2, sort_keys=True))
        return 0 if match is not False else 1
    m = p.manifest
    limit = settings.budget_tokens - settings.output_reserve
    what = (f"tick {args.tick}'s last request" if args.tick is not None
            else f"as of {at}" if at else f"as of seq {args.seq}" if args.seq is not None else "now")
    _out(f"context {what} · events #{m['thread_from']}–#{m['thread_to']} · model {m['model'] or '-'}")
    _out("sections: " + " · ".join(f"{k} {v}" for k, v in p.sections.items())
         + f" · total {p.tokens} (calibrated {m['calibrated_tokens']} of {limit}; ratio {m['calibration']})")
    _out("blocks: " + _blocks(p, settings, app))
    _out(f"inputs: {found.inputs}")
    comp = f"summary covers #1–#{m['covered_to']} (compaction #{m['compaction_seq']})" if m["compaction_seq"] \
        else "no compaction yet"
    _out(f"{comp} · request_hash {m['request_hash']}")
    if recorded is not None:
        _out(f"recorded request #{recorded.seq}: hash {'matches' if match else 'DIFFERS: ' + recorded.payload['request_hash']}")
    meter = meter_for(settings, _cache(app))   # kept counts first: the tokenizer loads only for new texts
    for i, msg in enumerate(p.messages):
        _out(_render_message(i, msg, meter.message(msg)))
    return 0 if match is not False else 1


# ------------------------------------------------------------------ replay


def _printed(results: Iterator[ReplayResult], as_json: bool) -> Iterator[ReplayResult]:
    for r in results:
        _out(json.dumps(r.to_dict(), sort_keys=True) if as_json
             else f"#{r.seq} tick {r.tick}: {'ok' if r.ok else 'MISMATCH'} {r.derived[:16]}")
        yield r


def cmd_replay(args: argparse.Namespace, app: Any) -> int:
    cache = _cache(app)
    agent_requests = replay(app.log, app.prompts, app.settings.context, policy=app.policy_dict(),
                            tools=app.tool_specs(), model=app.settings.model.name, cache=cache)
    summariser_requests = replay_summaries(app.log, app.prompts, app.settings.context, policy=app.policy_dict(),
                                           tools=app.tool_specs(), cache=cache)
    results = heapq.merge(agent_requests, summariser_requests, key=lambda r: r.seq)
    summary = verify(results if args.verify else _printed(results, args.json), stop_at_first=args.verify)
    first, total, bad = summary.first, summary.checked, len(summary.mismatches)
    if args.json:  # with --verify the only line; else the last, after one line per request
        _out(json.dumps({"ok": bad == 0, "checked": total, "mismatches": bad,
                         "first_mismatch": first.to_dict() if first else None}, sort_keys=True))
    elif first is None:
        _out(f"replay: {total} requests re-derived, every hash matches")
    else:
        _out(f"replay: request #{first.seq} (tick {first.tick}) does not match: recorded {first.recorded}, "
             f"re-derived {first.derived}")
        for why in first.reasons:
            _out(f"  because {why}")
        if not args.verify:
            _out(f"replay: {bad} of {total} requests differ")
    return 1 if (bad and args.verify) else 0


# ------------------------------------------------------------------ parser
