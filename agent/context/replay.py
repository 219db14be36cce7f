"""Replay: re-derive recorded model requests from the log, and say why one differs.

The prompts, policy and tool schemas a request was built from are read back from the log by the hashes
its manifest names (``input.recorded``, agent.context.inputs); only a log written before those were
recorded falls back to today's files and config."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agent.config import ContextSettings
from agent.context.build import (
    BUDGET_FIELDS,
    Projection,
    budget_fields,
    request_hash,
    settings_from_manifest,
    sha256_text,
    tools_hash,
)
from agent.context.cache import ProjectionCache
from agent.context.inputs import InForce, in_force, manifest_of, recorded
from agent.context.load import load, meter_for, project, project_at, request_of_tick, seq_at
from agent.context.prompts import Prompts
from agent.errors import UsageError
from agent.events import Event
from agent.events.canonical import canonical
from agent.store.log import EventLog


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


@dataclass
class ReplaySummary:
    """The outcome of a replay: how many requests were checked, and the mismatches met."""

    checked: int = 0
    mismatches: list[ReplayResult] = field(default_factory=list)

    @property
    def first(self) -> ReplayResult | None:
        return self.mismatches[0] if self.mismatches else None


def explain(manifest: dict[str, Any], p: Projection, *, prompts: Prompts, settings: ContextSettings,
            tools: list[dict[str, Any]], policy: dict[str, Any]) -> list[str]:
    """Why a re-derived request differs from the recorded one, as far as the manifest can tell."""
    reasons = []
    for name, h in sorted((manifest.get("prompt_hashes") or {}).items()):
        now = prompts.hashes.get(name)
        if now != h:
            reasons.append(f"prompt file {name} changed: recorded sha256 {h}, current {now}")
    if manifest.get("tools_hash") not in (None, tools_hash(tools)):
        reasons.append(f"tool specs changed: recorded tools_hash {manifest['tools_hash']}, current {tools_hash(tools)}")
    if "params_hash" in manifest and manifest["params_hash"] != p.manifest.get("params_hash"):
        reasons.append(f"model parameters differ: recorded params_hash {manifest['params_hash']}, re-derived "
                       f"{p.manifest.get('params_hash')}")
    if manifest.get("policy_hash") not in (None, sha256_text(canonical(policy))):
        reasons.append("the fleet policy in the system prompt changed: recorded policy_hash "
                       f"{manifest['policy_hash']}, current {sha256_text(canonical(policy))}")
    cur = budget_fields(settings)
    recorded = manifest.get("settings") or {}
    diff = [k for k in BUDGET_FIELDS if k in recorded and recorded[k] != cur[k]]
    if diff:
        reasons.append("context settings differ from today's (replayed with the recorded ones): " + ", ".join(
            f"{k} {recorded[k]} -> {cur[k]}" for k in diff))
    for key in ("covered_to", "compaction_seq", "sections"):
        if key in manifest and manifest[key] != p.manifest[key]:
            reasons.append(f"{key}: recorded {manifest[key]}, re-derived {p.manifest[key]}")
    if not reasons:
        reasons.append("the log up to the request's thread_to renders differently (events changed or "
                       "rendering code changed); run `fleet-agent log verify`")
    return reasons


def rederive(log: EventLog, req: Event, texts: dict[str, Any], prompts: Prompts, settings: ContextSettings, *,
             policy: dict[str, Any], tools: list[dict[str, Any]], model: str, cache: ProjectionCache
             ) -> tuple[InForce, Projection]:
    """The inputs a recorded ``model.request`` was built from (as the log holds them; today's only for what
    it does not) and the request re-derived from them: what replay and the training export compare."""
    manifest = manifest_of(req, texts)
    then = in_force(manifest, texts, prompts=prompts, policy=policy, tools=tools)
    p = project(log, then.prompts, settings_from_manifest(settings, manifest), policy=then.policy,
                tools=then.tools, until_seq=int(manifest["thread_to"]), model=manifest.get("model", model),
                cache=cache, params=then.params if "params_hash" in manifest else None)
    return then, p


def replay(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
           tools: list[dict[str, Any]], model: str = "", cache: ProjectionCache | None = None
           ) -> Iterator[ReplayResult]:
    """Re-derive every recorded request in order, each with the budget settings and the inputs (prompts,
    policy, tools) it recorded; today's are used only for inputs the log does not hold."""
    cache = cache or ProjectionCache()
    texts = recorded(log)
    for req in log.read(0, kinds=["model.request"]):
        manifest = manifest_of(req, texts)
        then, p = rederive(log, req, texts, prompts, settings, policy=policy, tools=tools, model=model, cache=cache)
        recorded_hash = req.payload["request_hash"]
        ok = p.request_hash == recorded_hash and not then.missing
        yield ReplayResult(req.seq, req.tick, recorded_hash, p.request_hash, ok,
                           [] if ok else [*(f"{m} not in the log" for m in then.missing),
                                          *explain(manifest, p, prompts=then.prompts, settings=settings,
                                                   tools=then.tools, policy=then.policy)])


def replay_summaries(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
                     tools: list[dict[str, Any]], cache: ProjectionCache | None = None) -> Iterator[ReplayResult]:
    """Re-plan every logged summariser request from the log as it stood, with the inputs it recorded (the
    model parameters' included), and check its hash. A retry's request is the first request, the rejected
    answer (read back from the ``summary.response`` its manifest names) and the retry instruction with the
    recorded reason: every request of a retry is re-derived, not only the first. (Compaction's planner loads
    here: inspecting one agent request, as ``context`` does, needs none of it.)"""
    from agent.context.compaction import Plan, plan, retry_messages

    cache = cache or ProjectionCache()
    texts = recorded(log)
    for req in log.read(0, kinds=["summary.request"]):
        m = req.payload["manifest"]
        then = in_force(m, texts, prompts=prompts, policy=policy, tools=tools)
        s = settings_from_manifest(settings, m)
        p = plan(load(log, int(m["end"])), prompts=then.prompts, settings=s, policy=then.policy, tools=then.tools,
                 meter=meter_for(s, cache), open_alert_ids=list(m["open_alert_ids"]),
                 owned_instance_ids=list(m["owned_instance_ids"]), model_name=str(m["model"]), force=bool(m["force"]),
                 version=req.version)
        reasons = [f"{x} not in the log" for x in then.missing]
        if not isinstance(p, Plan):
            derived = f"no plan: {p}"
        else:
            messages = p.messages
            if "retry_of" in m:
                rejected = _rejected_answer(log, m["retry_of"], req.seq)
                if rejected is None:
                    reasons.append(f"the rejected answer #{m['retry_of']} this retry names is not a summariser "
                                   "answer logged before it")
                messages = retry_messages(p.messages, rejected or "", str(m.get("reason") or ""))
            derived = request_hash(str(m["model"]), messages, p.tools, then.params if "params_hash" in m else None)
        ok = derived == req.payload["request_hash"] and not reasons
        yield ReplayResult(req.seq, req.tick, str(req.payload["request_hash"]), derived, ok,
                           [] if ok else reasons or ["the summariser's request re-plans differently (events, inputs "
                                                     "or rendering code changed); run `fleet-agent log verify`"])


def _rejected_answer(log: EventLog, seq: Any, before: int) -> str | None:
    """The text of the ``summary.response`` at ``seq`` when it precedes ``before``."""
    if not isinstance(seq, int) or seq >= before:
        return None
    e = next(iter(log.read(seq - 1, until_seq=seq)), None)
    if e is None or e.kind != "summary.response" or not e.payload.get("text"):
        return None
    return str(e.payload["text"])


def verify(results: Iterator[ReplayResult], *, stop_at_first: bool) -> ReplaySummary:
    """Count the results and collect mismatches (only the first, with ``stop_at_first``)."""
    summary = ReplaySummary()
    for r in results:
        summary.checked += 1
        if not r.ok:
            summary.mismatches.append(r)
            if stop_at_first:
                break
    return summary


@dataclass
class Inspection:
    """A projected request, and when it is a tick's last request, the recorded one it should equal.
    ``inputs``: which prompts, policy, tools and settings it was rendered with, said in one line."""

    projection: Projection
    recorded: Event | None
    inputs: str = "today's prompt files, policy, tool schemas and settings"

    @property
    def matches(self) -> bool | None:
        if self.recorded is None:
            return None
        return bool(self.recorded.payload["request_hash"] == self.projection.request_hash)


def _said(req: Event, then: InForce) -> str:
    """The line saying which logged inputs a time-travel view used, and which (if any) are today's."""
    got = ", ".join(then.from_log) or "none"
    out = f"rendered with the inputs logged for request #{req.seq} (tick {req.tick}): {got}"
    today = [n for n in ("system.md", "summarize.md", "policy", "tools") if n not in then.from_log]
    if today:
        out += "; today's " + ", ".join(today) + " (not in the log)"
    if then.missing:
        out += "; missing: " + "; ".join(then.missing)
    return out


def _request_of(log: EventLog, until: int) -> Event | None:
    """The ``model.request`` built from the log up to exactly ``until`` (logged right after it), if any."""
    for e in log.read(until, kinds=["model.request"], limit=1):
        texts = recorded(log, e.seq)
        if int(manifest_of(e, texts).get("thread_to", -1)) == until:
            return e
    return None


def _request_before(log: EventLog, until: int) -> Event | None:
    """The newest ``model.request`` at or before ``until``."""
    return next(iter(log.read(0, until_seq=until, kinds=["model.request"], newest_first=True, limit=1)), None)


def inspect_request(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
            tools: list[dict[str, Any]], model: str = "", at_ts: str | None = None, tick: int | None = None,
            seq: int | None = None, cache: ProjectionCache | None = None) -> Inspection:
    """The request as of a time, a tick's last request (checked against its hash) or a seq. A past moment
    is rendered as replay renders it: with the prompts, policy, tool schemas, model parameters and budget
    settings logged for the newest request at or before it (a tick's last request: that request's own),
    so a later config reload or prompt edit does not change what it shows; now is rendered with today's."""
    if sum(x is not None for x in (at_ts, tick, seq)) > 1:
        raise UsageError("give at most one of --at, --tick, --seq")
    cache = cache or ProjectionCache()
    if tick is not None:
        last = request_of_tick(log, tick)
        texts = recorded(log, last.seq)
        then, p = rederive(log, last, texts, prompts, settings, policy=policy, tools=tools, model=model, cache=cache)
        return Inspection(p, last, _said(last, then))
    if at_ts is None and seq is None:
        p = project_at(log, prompts, settings, policy=policy, tools=tools, model=model, cache=cache)
        return Inspection(p, None)
    until = seq_at(log, at_ts) if at_ts is not None else int(seq or 0)
    req = _request_of(log, until) or _request_before(log, until)
    if req is None:
        p = project_at(log, prompts, settings, policy=policy, tools=tools, model=model, seq=until, cache=cache)
        return Inspection(p, None, "no request was logged by then: today's prompt files, policy, tool schemas "
                                   "and settings")
    texts = recorded(log, req.seq)
    manifest = manifest_of(req, texts)
    then = in_force(manifest, texts, prompts=prompts, policy=policy, tools=tools)
    p = project(log, then.prompts, settings_from_manifest(settings, manifest), policy=then.policy, tools=then.tools,
                until_seq=until, model=manifest.get("model", model), cache=cache,
                params=then.params if "params_hash" in manifest else None)
    same = int(manifest.get("thread_to", -1)) == until
    return Inspection(p, req if same else None, _said(req, then))
