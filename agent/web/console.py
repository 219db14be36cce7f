"""What the console's pages and endpoints show, read from the log: one ``Console`` per process.

The console opens its own connection to the log (through an ``App`` of its own), so the daemon's ticks
and the console never share a transaction. Requests are served one at a time under ``lock``. Writes go
through the same feedback functions the CLI uses (``feedback.ack``, ``feedback.say``).
"""

from __future__ import annotations

import dataclasses
import difflib
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from agent import config, feedback, logsetup
from agent.config import Settings
from agent.context.load import not_before_first, not_past_the_end
from agent.context.prompts import Prompts
from agent.context.replay import inspect_request
from agent.context.shares import split, split_text
from agent.errors import FleetAgentError, UsageError
from agent.events import KINDS, Event, describe, render
from agent.fleet import spend as fleet_spend
from agent.runtime import status
from agent.runtime.app import App
from agent.times import utc_ts
from agent.web import charts, spend
from agent.web.auth import Auth
from agent.web.metrics import LogCollector, State, Totals, db_bytes, fold, registry_for

TICK_KINDS = ("tick.started", "tick.completed", "tick.failed")
ALERT_STATUSES = ("open", "acked", "resolved")
PAGE = 100

DaemonInfo = Callable[[], dict[str, Any]]


def ts_seconds(ts: str) -> float:
    return float(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp())


def tick_interval(s: config.ScheduleSettings, now: float) -> float:
    """Seconds between ticks: the interval, or the gap between a cron expression's next two runs."""
    if not s.cron:
        return float(s.interval)
    trig = config.cron_trigger(s.cron)
    first = trig.get_next_fire_time(None, datetime.fromtimestamp(now, UTC))
    second = trig.get_next_fire_time(first, first) if first else None
    if first is None or second is None:
        return float(s.interval)
    return max(1.0, float((second - first).total_seconds()))


class NotFound(LookupError):
    """What a page asks for does not exist (the console answers 404 with this message)."""


class Console:
    """Settings, a log connection of its own, the write token, and the metrics registry."""

    def __init__(self, settings: Settings, *, env: Mapping[str, str] | None = None,
                 clock: Callable[[], float] | None = None, prompts: Prompts | None = None,
                 daemon: DaemonInfo | None = None, start_problem: str | None = None) -> None:
        self.settings = settings
        self.app = App(settings, env=env, clock=clock, prompts=prompts, verify_writes=True)
        self.clock = clock or time.time
        self.auth = Auth(settings.http_token(env), settings.http.token_name)
        self.allowed_hosts = list(settings.http.allowed_hosts)
        self.daemon = daemon
        self.start_problem = start_problem
        self.lock = threading.RLock()
        self.collector = LogCollector(self)
        self.registry = registry_for(self.collector)
        self._tool_specs: list[dict[str, Any]] | None = None

    def apply_http(self, settings: Settings, env: Mapping[str, str] | None = None) -> None:
        """A reload's ``http.*`` (but ``listen``, which needs a new socket): the write token (a removed or
        rotated one stops writing at once, and every session made with it ends), its operator name and the
        allowed host names. A token that cannot be read leaves the console read-only and raises ConfigError:
        no writes rather than writes with a token the operator meant to replace."""
        self.allowed_hosts = list(settings.http.allowed_hosts)
        try:
            self.auth = Auth(settings.http_token(env), settings.http.token_name)
        except FleetAgentError:
            self.auth = Auth(None, settings.http.token_name)
            raise

    def close(self) -> None:
        with self.lock:
            self.app.close()

    def warm(self) -> None:
        """Fold the whole log into the metrics now (seconds at 10^6 events), so the first scrape is fast."""
        try:
            list(self.collector.collect())
        except Exception as e:  # noqa: BLE001 - a warm-up that fails leaves the fold to the first scrape
            logsetup.get_logger(__name__).warning("http.metrics_warmup_failed", error=type(e).__name__)

    @property
    def log(self) -> Any:
        return self.app.log

    def tool_specs(self) -> list[dict[str, Any]]:
        """The installed tools' specs, found once (entry points do not change while a process runs)."""
        if self._tool_specs is None:
            self._tool_specs = self.app.tool_specs()
        return self._tool_specs

    def tool_names(self) -> set[str]:
        return {s["function"]["name"] if "function" in s else s.get("name", "") for s in self.tool_specs()}

    # ------------------------------------------------------------------ metrics and health

    def metric_state(self, totals: Totals) -> State:
        """Fold the events since ``totals.seq`` into ``totals``; the gauges' values now."""
        with self.lock:
            lg = self.log
            store = lg.store
            head = lg.last_seq()
            if head > totals.seq:
                fold(totals, store.metric_totals(totals.seq, head), store.tick_durations(totals.seq, head),
                     self.tool_names(), head)
            fl = status.fleet(lg) or {}
            req = next(lg.read(0, kinds=["model.request"], newest_first=True, limit=1), None)
            sev: dict[str, int] = {s: 0 for s in feedback.SEVERITIES}
            for a in store.open_alerts():
                sev[a.severity] = sev.get(a.severity, 0) + 1
            last_ts = store.last_event_ts(TICK_KINDS)
            return State(
                last_seq=head, log_bytes=db_bytes(self.settings.db_path),
                last_tick_ts=ts_seconds(last_ts) if last_ts else None,
                request_tokens=int(req.payload["manifest"].get("calibrated_tokens", 0)) if req else None,
                budget_tokens=self.settings.context.budget_tokens, instances_by_status=dict(fl.get("states") or {}),
                fleet_dph=_num(fl.get("dph")), traffic_dph=_num(fl.get("traffic_dph")), dph_cap=self.settings.policy.max_total_dph, balance=_num(fl.get("balance")),
                spend=fleet_spend.month_to_date(lg), alerts_by_severity=sev)

    def health(self) -> tuple[bool, str]:
        """(healthy, why): the log verified at start and the newest tick is younger than 3 intervals."""
        if self.start_problem:
            return False, f"the event log failed verification at start: {self.start_problem}"
        with self.lock:
            last = self.log.store.last_event_ts(TICK_KINDS)
        if last is None:
            return False, "no tick has run yet"
        now = self.clock()
        age = now - ts_seconds(last)
        limit = 3 * tick_interval(self.settings.schedule, now)
        if age > limit:
            return False, f"the last tick was {age:.0f}s ago, more than 3 intervals ({limit:.0f}s)"
        return True, f"ok: the last tick was {max(age, 0):.0f}s ago"

    # ------------------------------------------------------------------ overview

    def overview(self) -> dict[str, Any]:
        with self.lock:
            lg = self.log
            now = self.clock()
            d = status.daemon_state(self.settings.data_path)
            d.update(status.daemon_events(lg))
            if self.daemon is not None:
                d.update(self.daemon())
            fl = status.fleet(lg)
            day, week = spend.day_and_week(lg.store, now)
            if fl is not None:  # the observation's own rows: they carry host and age too
                start = next(lg.read(0, kinds=["tick.started"], newest_first=True, limit=1))
                fl["instances"] = [{"status": "provisioning", **i}
                                   for i in start.payload.get("observation", {}).get("instances") or []]
            return {
                "daemon": d, "last_tick": status.last_tick(lg), "running_tick": status.running_tick(lg),
                "fleet": fl, "since": instance_since(lg, fl), "alerts": lg.store.open_alerts(),
                "directives": lg.store.active_directives(), "spend": fleet_spend.month_to_date(lg), "steering": self._steering(),
                "charts": [charts.step_chart("last 24 h", day, spend.window_start(now, 24), now),
                           charts.step_chart("last 7 days", week, spend.window_start(now, 24 * 7), now)],
                "next_tick": d.get("next_run") or _next_guess(lg, self.settings, now),
                "last_seq": lg.last_seq(), "now": now, "model_cost": fleet_spend.model_cost(lg, self.settings),
            }

    def _steering(self) -> dict[str, Any]:
        """The pause, the policy overrides and the host exclusions in force now (read-only here; they are
        set with `fleet-agent pause`, `policy set`, `hosts exclude`)."""
        from agent.fleet import steering

        lg = self.log
        return {"paused": steering.paused(lg), "overrides": sorted(steering.active_overrides(lg).values(),
                                                                    key=lambda o: o.id),
                "excluded_hosts": sorted(steering.excluded_hosts(self.settings, lg).values(),
                                         key=lambda x: x.host_id)}

    def silences(self) -> list[Any]:
        """The alert silences in force now (set with `fleet-agent alerts silence`)."""
        with self.lock:
            found: list[Any] = self.log.store.silences(now_ts=utc_ts(datetime.fromtimestamp(self.clock(), UTC)))
        return found

    # ------------------------------------------------------------------ alerts

    def alerts(self, status_: str | None, severity: str | None) -> list[Any]:
        """The alerts, newest first, of one status and severity (None: any); an unknown one is refused
        rather than shown as an empty list."""
        for what, v, known in (("status", status_, ALERT_STATUSES), ("severity", severity, feedback.SEVERITIES)):
            if v is not None and v not in known:
                raise UsageError(f"{what} {v[:40]!r} is not an alert {what}; choose one of: {', '.join(known)}")
        with self.lock:
            rows = self.log.store.alerts(all_=True)
        return [a for a in reversed(rows) if (not status_ or a.status == status_)
                and (not severity or a.severity == severity)]

    def alert(self, alert_id: int) -> tuple[Any, list[dict[str, Any]]]:
        with self.lock:
            lg = self.log
            a = lg.store.alert(alert_id)
            if a is None:
                raise UsageError(f"no alert #{alert_id}")
            history = []
            for seq in lg.store.alert_history_seqs(alert_id):
                e = lg.get(seq)
                if e is not None:
                    history.append(event_row(e))
            return a, history

    # None: already acked by someone; acking again changes nothing.
    def ack(self, alert_id: int, note: str | None) -> Event | None:
        with self.lock:
            return feedback.ack(self.log, alert_id, self.auth.name, note)

    def note(self, text: str, pin: bool) -> Event:
        with self.lock:
            return feedback.say(self.log, text, self.auth.name, pin=pin)

    # ------------------------------------------------------------------ thread

    def thread(self, *, kinds: list[str], query: str | None, before: int | None, after: int = 0,
               limit: int = PAGE) -> list[dict[str, Any]]:
        with self.lock:
            lg = self.log
            if query:
                hits = lg.search(query, limit=limit, until_seq=before - 1 if before else None)
                return [event_row(e, snippet=snip) for e, snip in hits if _kind_match(e.kind, kinds)]
            seqs = lg.store.events_page(before=before, after=after, kinds=kinds, limit=limit)
            return [event_row(e) for e in (lg.get(s) for s in seqs) if e is not None]

    def kinds(self) -> list[str]:
        """Every kind the vocabulary defines (asking the log would scan its whole kind index)."""
        return sorted(KINDS)

    # ------------------------------------------------------------------ time travel

    def moment(self, *, tick: int | None = None, seq: int | None = None, at: str | None = None) -> dict[str, Any]:
        """The request the model saw at a tick (its last request), a seq or a time, section by section. A
        time before the first event or a seq past the log's end is refused as ``context`` refuses it."""
        with self.lock:
            a, lg = self.app, self.log
            not_before_first(lg, at, "at")
            not_past_the_end(lg, seq, "seq")
            if tick is None and seq is None and at is None:
                tick = lg.store.latest_tick()
                if tick is None or not lg.store.tick_request_seqs(tick):
                    seq = lg.last_seq()
                    tick = None
            found = inspect_request(lg, a.prompts, self.settings.context, policy=a.policy_dict(),
                                    tools=self.tool_specs(), model=self.settings.model.name, at_ts=at, tick=tick,
                                    seq=seq, cache=a.projection_cache)
            p = found.projection
            tok = lg.tokenizer
            msgs = [{"role": m["role"], "content": m.get("content") or "",
                     "tool_calls": [f"{c['function']['name']}({c['function']['arguments']})"
                                    for c in m.get("tool_calls") or ()],
                     "tokens": tok.count_message(m)} for m in p.messages]
            response, results = _answer(lg, found.recorded)
            return {"projection": p, "sections": split_sections(msgs, p.sections), "recorded": found.recorded,
                    "matches": found.matches, "inputs": found.inputs, "response": response,
                    "split": split_text(split(p.sections, self.settings.context.budget_tokens,
                                              self.settings.context.output_reserve),
                                        self.settings.context.budget_tokens), "results": results, "tick": tick,
                    "seq": seq, "at": at, "budget": self.settings.context.budget_tokens,
                    "limit": self.settings.context.budget_tokens - self.settings.context.output_reserve,
                    "last_seq": lg.last_seq(), "latest_tick": lg.store.latest_tick() or 0}

    def diff(self, a: int, b: int) -> tuple[str, str, list[str]]:
        """A unified diff of the requests as of seq ``a`` and seq ``b``."""
        with self.lock:
            not_past_the_end(self.log, a, "a")
            not_past_the_end(self.log, b, "b")
        ma, mb = self.moment(seq=a), self.moment(seq=b)
        ta, tb = request_text(ma), request_text(mb)
        lines = list(difflib.unified_diff(ta.splitlines(), tb.splitlines(), f"as of seq {a}", f"as of seq {b}",
                                          lineterm="", n=2))
        return ma["projection"].request_hash, mb["projection"].request_hash, lines

    # ------------------------------------------------------------------ knowledge

    def knowledge(self) -> list[dict[str, Any]]:
        with self.lock:
            store = self.log.store
            out = []
            for name, v in store.knowledge_latest().items():
                out.append({"name": name, "version": v.version, "change": v.change, "size": v.size, "ts": v.ts,
                            "by": _by(self.log.get(v.seq))})
            return out

    def knowledge_file(self, name: str, version: int | None) -> dict[str, Any]:
        with self.lock:
            lg = self.log
            versions = lg.store.knowledge_versions(name)
            if not versions:
                raise NotFound(f"the log knows no knowledge file {name!r}; the knowledge page lists those it knows")
            rows = []
            for v in versions:
                e = lg.get(v.seq)
                p = e.payload if e is not None else {}
                rows.append({"version": v.version, "ts": v.ts, "change": v.change, "size": v.size, "seq": v.seq,
                             "by": p.get("by") or "edited on disk", "diff": p.get("diff"), "text": p.get("text")})
            chosen = rows[-1] if version is None else next((r for r in rows if r["version"] == version), None)
            if chosen is None:
                raise NotFound(f"{name} has no version {version}; its versions are 1 to {rows[-1]['version']}")
            text = chosen["text"] if chosen["text"] is not None else _text_at(rows, chosen["version"])
            return {"name": name, "versions": list(reversed(rows)), "chosen": chosen, "text": text}


# ------------------------------------------------------------------ helpers


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _kind_match(kind: str, kinds: list[str]) -> bool:
    return not kinds or any(kind == k or kind.startswith(k.rstrip("*").rstrip(".") + ".") for k in kinds)


def _by(e: Event | None) -> str:
    return str(e.payload.get("by") or "edited on disk") if e is not None else "?"


def _text_at(rows: list[dict[str, Any]], version: int) -> str | None:
    """The newest full text logged at or before ``version`` (changes log a diff; the add logs the text)."""
    for r in sorted(rows, key=lambda r: -r["version"]):
        if r["version"] <= version and r["text"] is not None:
            return str(r["text"])
    return None


def event_row(e: Event, snippet: str | None = None) -> dict[str, Any]:
    msg = render(e)
    return {"seq": e.seq, "ts": e.ts, "kind": e.kind, "source": e.source, "tick": e.tick,
            "role": msg["role"] if msg else None, "text": describe(e), "snippet": snippet}


def split_sections(msgs: list[dict[str, Any]], tokens: dict[str, int]) -> list[dict[str, Any]]:
    """The request's messages grouped as system, pinned, summary and thread (as ``assemble`` builds it)."""
    out = [{"name": "system", "tokens": tokens.get("system", 0), "messages": msgs[:1]}]
    i = 1
    for name in ("pinned", "summary"):
        if tokens.get(name):
            out.append({"name": name, "tokens": tokens[name], "messages": msgs[i:i + 1]})
            i += 1
        else:
            out.append({"name": name, "tokens": 0, "messages": []})
    out.append({"name": "thread", "tokens": tokens.get("thread", 0), "messages": msgs[i:]})
    out.append({"name": "tools", "tokens": tokens.get("tools", 0), "messages": []})
    return out


def request_text(m: dict[str, Any]) -> str:
    parts = []
    for sec in m["sections"]:
        for msg in sec["messages"]:
            parts.append(f"── {sec['name']} · {msg['role']}")
            parts.append(msg["content"])
            parts.extend(f"→ {c}" for c in msg["tool_calls"])
    return "\n".join(parts)


def _answer(lg: Any, req: Event | None) -> tuple[Event | None, list[Event]]:
    """The model's response to request ``req`` and the results of the tools it called."""
    if req is None:
        return None, []
    resp = next((e for e in lg.read(req.seq, kinds=["model.response"], tick=req.tick, limit=1)
                 if e.payload.get("request_seq") in (None, req.seq)), None)
    if resp is None:
        return None, []
    ids = {c.get("id") for c in resp.payload.get("tool_calls") or ()}
    results = [e for e in lg.read(resp.seq, kinds=["tool.result", "policy.blocked"], tick=req.tick)
               if e.payload.get("call_id") in ids]
    return resp, results


def instance_since(lg: Any, fl: dict[str, Any] | None, lookback: int = 200) -> dict[Any, str]:
    """instance id -> the ts of the oldest of the recent observations since which its status is unchanged."""
    if not fl:
        return {}
    want = {i["id"]: i["status"] for i in fl["instances"]}
    since: dict[Any, str] = {}
    done: set[Any] = set()
    for e in lg.read(0, kinds=["tick.started"], newest_first=True, limit=lookback):
        seen = {i.get("id"): i.get("status") or "provisioning" for i in e.payload.get("observation", {}).get(
            "instances") or []}
        for iid, st in want.items():
            if iid in done:
                continue
            if seen.get(iid) == st:
                since[iid] = e.ts
            else:
                done.add(iid)
        if len(done) == len(want):
            break
    return since


def _next_guess(lg: Any, s: Settings, now: float) -> str | None:
    """Without a daemon to ask: the newest tick's start plus the interval (None when nothing ran)."""
    last = lg.store.last_event_ts(("tick.started",))
    if last is None:
        return None
    t = ts_seconds(last) + tick_interval(s.schedule, now)
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%SZ")


def asdict(x: Any) -> dict[str, Any]:
    return dataclasses.asdict(x)


__all__ = ["Console", "FleetAgentError"]
