"""What the model decided in the origin and in a fork, tick by tick and step by step.

A decision is one tool call the model asked for and what came of it: ok, an error, or refused by policy
(with the rule). Alerts raised and how each tick ended are compared too. Two decisions are the same when
the tool, its arguments and the kind of outcome (ok, error, the policy rule) are the same, and, for a call
that changed nothing (a search, a read), what it returned: two searches that showed the model different
offers are different decisions. The details of a call that acted (an instance id, an error's wording) are
shown but not compared.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from agent.events import Event
from agent.store.log import EventLog


@dataclass(frozen=True)
class Decision:
    name: str
    arguments: str
    outcome: str     # ok | error | blocked:<rule> | not run
    detail: str = ""
    content: str = ""   # what a call that changed nothing returned (a hash of it): compared

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.name, self.arguments, self.outcome, self.content

    def show(self, *, detail: bool = True) -> str:
        what = {"ok": "ok", "error": "ERROR", "not run": "not run"}.get(self.outcome)
        if what is None:
            what = "BLOCKED " + self.outcome.removeprefix("blocked:")
        tail = f": {self.detail}" if self.detail and detail else ""
        return f"{self.name}({self.arguments}) {what}{tail}"


@dataclass
class TickDecisions:
    tick: int
    steps: list[list[Decision]] = field(default_factory=list)
    alerts: list[str] = field(default_factory=list)
    end: str = "not in the log"

    def to_dict(self) -> dict[str, Any]:
        return {"tick": self.tick, "steps": [[d.__dict__ for d in s] for s in self.steps], "alerts": self.alerts,
                "end": self.end}


def _args(raw: str) -> str:
    try:
        return json.dumps(json.loads(raw or "{}"), sort_keys=True, ensure_ascii=False)
    except ValueError:
        return raw


def _outcome(p: dict[str, Any]) -> tuple[str, str, str]:
    """(outcome, detail shown, content compared) of one tool result."""
    if p.get("ok"):
        eff = p.get("effect") or {}
        if eff.get("type"):
            return "ok", f"{eff['type']} {eff.get('instance_id')}", ""
        out = str(p.get("output") or "")
        digest = hashlib.sha256(out.encode()).hexdigest()[:12]
        first = next((ln for ln in out.splitlines() if ln.strip()), "")
        return "ok", f"returned {len(out):,} chars (sha256 {digest}): {first[:80]}", digest
    return "error", (p.get("error") or "").splitlines()[0][:120] if p.get("error") else "", ""


class _Collector:
    def __init__(self, tick: int) -> None:
        self.out = TickDecisions(tick)
        self.index: dict[str, tuple[int, int]] = {}

    def add(self, e: Event) -> None:
        p, steps = e.payload, self.out.steps
        if e.kind == "model.response":
            steps.append([])
            for c in p.get("tool_calls") or []:
                self.index[c["id"]] = (len(steps) - 1, len(steps[-1]))
                steps[-1].append(Decision(c["name"], _args(c["arguments"]), "not run"))
        elif e.kind in ("tool.result", "policy.blocked") and p.get("call_id") in self.index:
            i, j = self.index[p["call_id"]]
            d = steps[i][j]
            if e.kind == "policy.blocked":
                steps[i][j] = Decision(d.name, d.arguments, f"blocked:{p['rule']}", (p.get("detail") or "")[:120])
            elif not d.outcome.startswith("blocked:"):
                outcome, detail, content = _outcome(p)
                steps[i][j] = Decision(d.name, d.arguments, outcome, detail, content)
        elif e.kind == "alert.raised":
            self.out.alerts.append(f"{p.get('severity')}: {p.get('title')}")
        elif e.kind == "tick.completed":
            self.out.end = "completed"
        elif e.kind == "tick.failed":
            self.out.end = f"failed: {p.get('reason')}"


def decisions(log: EventLog, ticks: list[int]) -> dict[int, TickDecisions]:
    """Every decision of each tick in ``ticks``, in order."""
    out = {}
    for t in ticks:
        c = _Collector(t)
        for e in log.read(0, tick=t):
            c.add(e)
        out[t] = c.out
    return out


@dataclass
class TickDiff:
    tick: int
    original: TickDecisions
    fork: TickDecisions

    @property
    def same(self) -> bool:
        a, b = self.original, self.fork
        return ([[d.key for d in s] for s in a.steps] == [[d.key for d in s] for s in b.steps]
                and a.alerts == b.alerts and a.end.split(":")[0] == b.end.split(":")[0])


def compare(origin: EventLog, fork: EventLog, ticks: list[int]) -> list[TickDiff]:
    a, b = decisions(origin, ticks), decisions(fork, ticks)
    return [TickDiff(t, a[t], b[t]) for t in ticks]


def _pair(label: str, a: str, b: str) -> list[str]:
    if a == b:
        return [f"  {label:<8} same      {a}"]
    return [f"  {label:<8} original  {a}", f"  {'':<8} fork      {b}"]


def _block(label: str, a: list[Decision] | None, b: list[Decision] | None) -> list[str]:
    """A step whose calls do not line up: the original's calls, then the fork's."""
    lines = []
    for who, calls in (("original", a), ("fork", b)):
        shown = ["(no step)"] if calls is None else [d.show() for d in calls] or ["(no tool call)"]
        for text in shown:
            lines.append(f"  {label:<8} {who:<9} {text}")
            label = ""
    return lines


def _step(n: int, a: list[Decision] | None, b: list[Decision] | None) -> list[str]:
    label = f"step {n + 1}"
    if a is None or b is None or len(a) != len(b) or not a:
        if a is not None and b is not None and not a and not b:
            return _pair(label, "(no tool call)", "(no tool call)")
        return _block(label, a, b)
    lines: list[str] = []
    for m, (da, db) in enumerate(zip(a, b, strict=True)):
        same = da.key == db.key
        lines += _pair(label if m == 0 else "", da.show(detail=not same), db.show(detail=not same))
    return lines


def render(diffs: list[TickDiff]) -> list[str]:
    """Readable lines: per tick, each step's decisions side by side ('same' when they agree)."""
    lines: list[str] = []
    for d in diffs:
        lines.append(f"tick {d.tick}: {'same decisions' if d.same else 'DIFFERENT'}")
        a, b = d.original.steps, d.fork.steps
        for n in range(max(len(a), len(b))):
            lines += _step(n, a[n] if n < len(a) else None, b[n] if n < len(b) else None)
        lines += _pair("alerts", "; ".join(d.original.alerts) or "none", "; ".join(d.fork.alerts) or "none")
        lines += _pair("end", d.original.end, d.fork.end)
    return lines
