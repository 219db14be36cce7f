"""The built-in rules provider: a deterministic fleet policy behind the model interface.

Not a language model. It reads the latest observation and this tick's tool
results from the log, and scales the fleet to demand within policy: destroy
our dead or stuck instances, search when short, rent the cheapest offers on
hosts no knowledge file or directive blacklists, destroy surplus when the queue
is empty. It answers through the same tool calls a model would, so every
guardrail, event and replay path is exercised the same way. Used by the demo
and selectable with ``model.provider: rules``.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Any

from agent.model.llm import ModelReply, ToolCall, Usage

JOBS_PER_INSTANCE_H = 8.0
DRAIN_HOURS = 2.0
DEAD = ("exited", "offline", "unknown", "stopped")  # we never stop an instance: stopped is a failure
FAILED_HOST_TICKS = 48  # observations scanned for hosts where one of our instances died
ADVICE_SHOWN = 2  # advice the rules cannot parse, quoted in the decision text (the rest counted)


class RulesProvider:
    """Deterministic rules behind the ChatProvider interface (``name`` says what it is)."""

    can_summarise = False

    def __init__(self, app: Any) -> None:
        self.app = app
        self.name = "rules-provider"

    def list_models(self) -> list[str]:
        return [self.name]

    # -------------------------------------------------------------- state from the log

    def _state(self) -> tuple[Any, list[Any]]:
        log = self.app.log
        start = next(log.read(0, kinds=["tick.started"], newest_first=True, limit=1))
        since = list(log.read(start.seq, kinds=["model.response", "tool.result"]))
        return start, since

    def _steering_texts(self) -> list[str]:
        log = self.app.log
        from agent.feedback import read_knowledge

        names = log.store.knowledge_names()
        texts = [t for n in names if (t := read_knowledge(log, n))]
        texts += [d.text for d in log.store.active_directives()]
        return texts

    def _failed_hosts(self, stuck_after: float) -> set[int]:
        """Hosts where one of our instances was seen dead in recent observations: renting there
        again would only repeat the failure (and spend the hourly rent budget)."""
        out: set[int] = set()
        for e in self.app.log.read(0, kinds=["tick.started"], newest_first=True, limit=FAILED_HOST_TICKS):
            kept = set(e.payload["observation"].get("credit_stopped") or [])
            for i in e.payload["observation"].get("instances") or []:
                if i.get("ours") and i.get("host_id") is not None and i["id"] not in kept and _is_dead(i, stuck_after):
                    out.add(int(i["host_id"]))
        return out

    # -------------------------------------------------------------- the policy

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        t0 = time.monotonic()
        start, since = self._state()
        tick = start.tick
        plan = self._plan(start.payload["observation"])
        responses = [e for e in since if e.kind == "model.response"]
        results = [e for e in since if e.kind == "tool.result"]
        if not responses:
            calls, text = _first_step(plan)
        else:
            calls, text = _rent_step(plan, results)
        tool_calls = tuple(ToolCall(id=f"rules_{tick}_{len(responses)}_{n}", name=name,
                                    arguments=json.dumps(args, sort_keys=True))
                           for n, (name, args) in enumerate(calls))
        return ModelReply(text=text, tool_calls=tool_calls, usage=Usage(0, 0, 0),
                          finish_reason="tool_calls" if tool_calls else "stop",
                          latency_ms=(time.monotonic() - t0) * 1000, model=self.name)

    def _plan(self, obs: dict[str, Any]) -> _Plan:
        """The fleet as observed at the tick's start, sorted into dead and live, and the target size. What
        binds (policy, overrides, exclusions, accepted constraints) and what the directives and knowledge
        files say come from the one parser of operators' words (``App.steering_view``)."""
        s = self.app.settings
        view = self.app.steering_view(self._steering_texts())
        banned = set(view.excluded_hosts) | {int(c.value) for c in view.words.constraints
                                             if c.kind == "exclude_host"}
        cap = view.max_instances()
        ours = [i for i in obs["instances"] if i["ours"]]
        stuck_after = s.alerts.stuck_after
        kept = set(obs.get("credit_stopped") or [])  # stopped for lack of credit: kept for the top-up, not dead
        dead = [i for i in ours if i["id"] not in kept and (_is_dead(i, stuck_after) or i["host_id"] in banned)]
        avoid = banned | self._failed_hosts(stuck_after)
        live = [i for i in ours if i not in dead]
        d = obs.get("demand") or {}
        pending = d.get("pending") or 0
        rate = d.get("arrival_rate_per_h") or 0.0
        target = min(cap, math.ceil((rate + pending / DRAIN_HOURS) / JOBS_PER_INSTANCE_H)) if d else len(live)
        credit = obs.get("balance")
        if isinstance(credit, int | float) and credit <= s.policy.credit_reserve:
            target = min(target, len(live))  # no rent at or below the credit reserve: hold until a top-up
        return _Plan(banned, avoid, cap, dead, live, pending, rate, target, view, _advice_text(view.advice))


def _advice_text(advice: tuple[str, ...]) -> str:
    """The decision text's word on operator advice the rules cannot turn into a rule."""
    if not advice:
        return ""
    quoted = "; ".join(repr(a[:60]) for a in advice[:ADVICE_SHOWN])
    more = f" and {len(advice) - ADVICE_SHOWN} more" if len(advice) > ADVICE_SHOWN else ""
    return f"; operator advice the rules provider cannot parse into a rule, not followed: {quoted}{more}"


@dataclass(frozen=True)
class _Plan:
    banned: set[int]
    avoid: set[int]  # blacklisted hosts and hosts where one of ours died
    cap: int
    dead: list[dict[str, Any]]
    live: list[dict[str, Any]]
    pending: int
    rate: float
    target: int
    view: Any = None  # agent.fleet.constraints.InForce: what binds, and the operators' words
    advice: str = ""


Calls = list[tuple[str, dict[str, Any]]]


def _first_step(plan: _Plan) -> tuple[Calls, str]:
    """Destroy the dead and the surplus, search when short."""
    calls: Calls = []
    pending, live, cap, target = plan.pending, plan.live, plan.cap, plan.target
    for i in plan.dead:
        why = "its host is blacklisted by the operators" if i["host_id"] in plan.banned else \
            f"it is {i['status']} after {int(i['age_s']) // 60} min"
        calls.append(("destroy_instance", {"instance_id": i["id"], "reason": f"replace: {why}"}))
    surplus = len(live) - target
    if surplus > 0 and (pending < 5 or len(live) > cap):
        for i in sorted(live, key=lambda x: (x["status"] == "running", -x["id"]))[:surplus]:
            calls.append(("destroy_instance", {"instance_id": i["id"],
                                               "reason": f"scale down: {pending} pending, target {target} (cap {cap})"}))
    need = target - len(live)
    if need > 0:
        calls.append(("search_offers", {"limit": min(25, need + 3 + len(plan.avoid))}))
    text = (f"rules provider: {pending} pending, arriving ~{plan.rate:.0f}/h; {len(live)} live of ours, "
            f"target {target} (cap {cap}); " + (f"{len(plan.dead)} to replace; " if plan.dead else "")
            + (f"searching for {need}" if need > 0 else "no rentals needed") + plan.advice)
    return calls, text


def _rent_step(plan: _Plan, results: list[Any]) -> tuple[Calls, str]:
    """After a search (and no rent yet this tick): rent the cheapest offers on hosts not avoided."""
    searched = [e for e in results if e.payload["name"] == "search_offers" and e.payload["ok"]]
    rented_already = any(e.payload["name"] == "rent_instance" for e in results)
    need = plan.target - len(plan.live)
    if not (searched and not rented_already and need > 0):
        return [], "rules provider: done for this tick"
    offers = _parse_offers(searched[-1].payload.get("output", ""))
    refused = {o["id"]: plan.view.offer_refusal(o["gpu"], o["dph"], o["host"]) for o in offers} if plan.view else {}
    picks = [o for o in offers if o["host"] not in plan.avoid and not refused.get(o["id"])][:need]
    calls: Calls = [("rent_instance", {"offer_id": o["id"], "reason":
                                       f"{plan.pending} jobs pending; {o['gpu']} at ${o['dph']:.3f}/h"})
                    for o in picks]
    skipped = len([o for o in offers if o["host"] in plan.avoid or refused.get(o["id"])])
    text = f"rules provider: renting {len(picks)} of {need} needed" + \
        (f"; skipped {skipped} offers on excluded or failed hosts or outside what binds" if skipped else "")
    return calls, text


def _is_dead(i: dict[str, Any], stuck_after: float) -> bool:
    """An observed instance that will not work: exited/offline/unknown, stopped without our asking, a
    container that cannot start, or in a status other than running for longer than ``stuck_after``
    since that status was first observed."""
    return (i["status"] in DEAD or "OCI runtime" in (i.get("status_msg") or "")
            or (i["status"] != "running" and i["age_s"] > stuck_after))


def _parse_offers(table: str) -> list[dict[str, Any]]:
    out = []
    for line in table.splitlines()[1:]:
        parts = [p.strip() for p in line.split("|")]
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        try:
            out.append({"id": int(parts[0]), "gpu": parts[1], "dph": float(parts[2]), "rel": float(parts[3]),
                        "host": int(parts[4]) if parts[4].isdigit() else -1})
        except ValueError:
            continue
    return out
