"""Operator commands for the model's context: `context` (what the model saw) and `replay`.

`context` prints exactly the messages of a request, as of now, a time, a tick's
last request or a seq, with per-section token counts. `replay` re-derives every
recorded `model.request` from the log and the prompt files and checks each
request hash; `--verify` stops at the first mismatch and says why.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agent.context import (
    BUDGET_FIELDS,
    Projection,
    budget_fields,
    parse_time,
    project,
    project_at,
    request_of_tick,
    settings_from_manifest,
    sha256_text,
    tools_hash,
)
from agent.events import Event
from agent.store.log import canonical


def _out(s: str = "") -> None:
    sys.stdout.write(s + "\n")


# ------------------------------------------------------------------ context


def _render_message(i: int, m: dict[str, Any], tokens: int) -> str:
    tag = m["role"] + (f" → {m['tool_call_id']}" if m.get("tool_call_id") else "")
    lines = [f"── [{i}] {tag} ({tokens} tokens)"]
    if m.get("content"):
        lines.append(m["content"])
    for c in m.get("tool_calls") or ():
        lines.append(f"→ {c['function']['name']}({c['function']['arguments']})  [{c['id']}]")
    return "\n".join(lines)


def cmd_context(args: argparse.Namespace, app: Any) -> int:
    log = app.log
    settings = app.settings.context
    at = parse_time(args.at) if args.at else None
    p = project_at(log, app.prompts, settings, policy=app.policy_dict(), tools=app.tool_specs(),
                   model=app.settings.model.name, at_ts=at, tick=args.tick, seq=args.seq)
    recorded: Event | None = request_of_tick(log, args.tick) if args.tick is not None else None
    match = None if recorded is None else recorded.payload["request_hash"] == p.request_hash
    if args.json:
        _out(json.dumps({"messages": p.messages, "manifest": p.manifest, "tokens": p.tokens,
                         "sections": p.sections, "recorded_request_seq": recorded.seq if recorded else None,
                         "recorded_hash_matches": match}, ensure_ascii=False, indent=2, sort_keys=True))
        return 0 if match is not False else 1
    m = p.manifest
    limit = settings.budget_tokens - settings.output_reserve
    what = (f"tick {args.tick}'s last request" if args.tick is not None
            else f"as of {at}" if at else f"as of seq {args.seq}" if args.seq is not None else "now")
    _out(f"context {what} · events #{m['thread_from']}–#{m['thread_to']} · model {m['model'] or '-'}")
    _out("sections: " + " · ".join(f"{k} {v}" for k, v in p.sections.items())
         + f" · total {p.tokens} (calibrated {m['calibrated_tokens']} of {limit}; ratio {m['calibration']})")
    comp = f"summary covers #1–#{m['covered_to']} (compaction #{m['compaction_seq']})" if m["compaction_seq"] \
        else "no compaction yet"
    _out(f"{comp} · request_hash {m['request_hash']}")
    if recorded is not None:
        _out(f"recorded request #{recorded.seq}: hash {'matches' if match else 'DIFFERS: ' + recorded.payload['request_hash']}")
    tok = app.log.tokenizer
    for i, msg in enumerate(p.messages):
        _out(_render_message(i, msg, tok.count_message(msg)))
    return 0 if match is not False else 1


# ------------------------------------------------------------------ replay


@dataclass
class ReplayResult:
    seq: int
    tick: int | None
    recorded: str
    derived: str
    ok: bool
    reasons: list[str]

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def explain(manifest: dict[str, Any], p: Projection, app: Any, tools: list[dict[str, Any]],
            policy: dict[str, Any]) -> list[str]:
    """Why a re-derived request differs from the recorded one, as far as the manifest can tell."""
    reasons = []
    current = app.prompts.hashes
    for name, h in sorted((manifest.get("prompt_hashes") or {}).items()):
        now = current.get(name)
        if now != h:
            reasons.append(f"prompt file {name} changed: recorded sha256 {h}, current {now}")
    if manifest.get("tools_hash") not in (None, tools_hash(tools)):
        reasons.append(f"tool specs changed: recorded tools_hash {manifest['tools_hash']}, current {tools_hash(tools)}")
    if manifest.get("policy_hash") not in (None, sha256_text(canonical(policy))):
        reasons.append("the fleet policy in the system prompt changed: recorded policy_hash "
                       f"{manifest['policy_hash']}, current {sha256_text(canonical(policy))}")
    cur = budget_fields(app.settings.context)
    diff = [k for k in BUDGET_FIELDS if k in (manifest.get("settings") or {}) and manifest["settings"][k] != cur[k]]
    if diff:
        reasons.append("context settings differ from today's (replayed with the recorded ones): " + ", ".join(
            f"{k} {manifest['settings'][k]} -> {cur[k]}" for k in diff))
    for key in ("covered_to", "compaction_seq", "sections"):
        if key in manifest and manifest[key] != p.manifest[key]:
            reasons.append(f"{key}: recorded {manifest[key]}, re-derived {p.manifest[key]}")
    if not reasons:
        reasons.append("the log up to the request's thread_to renders differently (events changed or "
                       "rendering code changed); run `fleet-agent log verify`")
    return reasons


def replay(app: Any) -> Iterator[ReplayResult]:
    """Re-derive every recorded request in order."""
    log = app.log
    tools = app.tool_specs()
    policy = app.policy_dict()
    for req in log.read(0, kinds=["model.request"]):
        manifest = req.payload["manifest"]
        settings = settings_from_manifest(app.settings.context, manifest)
        p = project(log, app.prompts, settings, policy=policy, tools=tools,
                    until_seq=int(manifest["thread_to"]), model=manifest.get("model", app.settings.model.name))
        recorded = req.payload["request_hash"]
        ok = p.request_hash == recorded
        yield ReplayResult(req.seq, req.tick, recorded, p.request_hash, ok,
                           [] if ok else explain(manifest, p, app, tools, policy))


def cmd_replay(args: argparse.Namespace, app: Any) -> int:
    total = bad = 0
    first: ReplayResult | None = None
    for r in replay(app):
        total += 1
        if args.json and not args.verify:
            _out(json.dumps(r.to_dict(), sort_keys=True))
        elif not args.verify:
            _out(f"#{r.seq} tick {r.tick}: {'ok' if r.ok else 'MISMATCH'} {r.derived[:16]}")
        if not r.ok:
            bad += 1
            first = first or r
            if args.verify:
                break
    if args.json and args.verify:
        _out(json.dumps({"ok": bad == 0, "checked": total, "first_mismatch": first.to_dict() if first else None},
                        sort_keys=True))
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


def register(sub: Any) -> None:
    s = sub.add_parser("context", help="print exactly what the model saw (or would see now), with token counts",
                       description="Project the model's request from the log: now, as of a time (--at), the last "
                       "request of a tick (--tick, checked against its recorded hash) or a seq (--seq). Shows each "
                       "section's tokens and every message.")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--at", metavar="TIME", help="as of this UTC time (ISO 8601, e.g. 2026-11-29T10:05)")
    g.add_argument("--tick", type=int, metavar="N", help="the last request tick N sent")
    g.add_argument("--seq", type=int, metavar="S", help="as of event seq S")
    s.add_argument("--json", action="store_true", help="print messages and manifest as JSON")
    s.set_defaults(func=cmd_context)

    s = sub.add_parser("replay", help="re-derive every past model request and check its hash",
                       description="Re-derive every recorded model.request from the log and the prompt files and "
                       "compare request hashes. --verify stops at the first mismatch, says why and exits 1.")
    s.add_argument("--verify", action="store_true", help="exit 1 at the first mismatch")
    s.add_argument("--json", action="store_true", help="JSON output")
    s.set_defaults(func=cmd_replay)
