"""Prometheus metrics, read from the event log: the same numbers whether the daemon or ``fleet-agent web``
serves them.

Counters are folded incrementally: each scrape asks the store for the totals of the events appended
since the previous scrape (grouped in SQL, so a scrape costs what was appended, not the log's length),
and adds them. Gauges (fleet, balance, spend, alerts, the log's size) are read from the newest state.
Label values are bounded: tools outside the installed set, unknown rules and failure kinds become
``other``, and no instance id is ever a label.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

# Tick duration buckets, in seconds.
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# At most this many distinct values of one label; the rest are counted as "other".
MAX_LABEL_VALUES = 40


@dataclass
class Totals:
    """The counters so far, and the seq they cover."""

    seq: int = 0
    ticks: Counter[str] = field(default_factory=Counter)  # ok | failed
    failed_by_reason: Counter[str] = field(default_factory=Counter)
    model_steps: int = 0
    tokens: Counter[str] = field(default_factory=Counter)  # prompt | cached | completion: the agent's and summariser's
    summary_tokens: Counter[str] = field(default_factory=Counter)  # the summariser's share of ``tokens``
    compactions: Counter[str] = field(default_factory=Counter)
    tool_calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    policy_blocks: Counter[str] = field(default_factory=Counter)
    idle_ticks: int = 0
    durations: list[int] = field(default_factory=lambda: [0] * (len(DURATION_BUCKETS) + 1))
    duration_sum: float = 0.0


def _bounded(value: Any, seen: Iterable[str], allowed: set[str] | None = None) -> str:
    """``value`` as a label: itself when allowed (or, with no list, while fewer than MAX_LABEL_VALUES are in
    use), else ``other``."""
    v = str(value) if value is not None else "other"
    if allowed is not None:
        return v if v in allowed else "other"
    known = set(seen)
    return v if v in known or len(known) < MAX_LABEL_VALUES else "other"


def fold(t: Totals, rows: list[dict[str, Any]], durations: list[float], tools: set[str], until: int) -> None:
    """Add the store's grouped totals of (t.seq, until] to ``t``."""
    for r in rows:
        kind, a, b, n = r["kind"], r["a"], r["b"], int(r["n"])
        if kind == "tick.completed":
            t.ticks["ok"] += n
            t.idle_ticks += int(r["idle"] or 0)
        elif kind == "tick.failed":
            t.ticks["failed"] += n
            t.failed_by_reason[_bounded(a, t.failed_by_reason)] += n
        elif kind == "model.response":
            t.model_steps += n
            for k in ("prompt", "cached", "completion"):
                t.tokens[k] += int(r[k] or 0)
        elif kind == "summary.response":   # priced like the agent's calls; v1 answers carry no usage
            for k in ("prompt", "cached", "completion"):
                t.tokens[k] += int(r[k] or 0)
                t.summary_tokens[k] += int(r[k] or 0)
        elif kind == "tool.result":
            t.tool_calls[(_bounded(a, (), tools), str(b))] += n
        elif kind == "policy.blocked":
            t.policy_blocks[_bounded(a, t.policy_blocks)] += n
        elif kind == "context.compacted":
            t.compactions[_bounded(a, (), {"llm", "fallback"})] += n
    for ms in durations:
        s = ms / 1000
        t.duration_sum += s
        i = next((i for i, b in enumerate(DURATION_BUCKETS) if s <= b), len(DURATION_BUCKETS))
        t.durations[i] += 1
    t.seq = until


def _counter(name: str, doc: str, labels: list[str], values: Iterable[tuple[Iterable[str], float]]) -> Metric:
    m = CounterMetricFamily(name, doc, labels=labels)
    for lv, v in values:
        m.add_metric(list(lv), v)
    return m


def _gauge(name: str, doc: str, value: float | None, labels: list[str] | None = None,
           values: Iterable[tuple[Iterable[str], float]] = ()) -> Metric:
    m = GaugeMetricFamily(name, doc, labels=labels or [])
    if labels:
        for lv, v in values:
            m.add_metric(list(lv), v)
    elif value is not None:
        m.add_metric([], value)
    return m


@dataclass(frozen=True)
class State:
    """What the gauges show, read from the newest state of the log."""

    last_seq: int
    log_bytes: int
    last_tick_ts: float | None
    request_tokens: int | None
    budget_tokens: int
    instances_by_status: dict[str, int]
    fleet_dph: float | None
    traffic_dph: float | None  # the bandwidth vast.ai bills the fleet per GB on top, as measured
    dph_cap: float
    balance: float | None
    spend: dict[str, float]  # today, month: agent.fleet.spend.month_to_date
    alerts_by_severity: dict[str, int]


def counter_metrics(t: Totals) -> Iterator[Metric]:
    p = "fleet_agent_"
    yield _counter(p + "ticks", "Ticks that ended, by outcome.", ["outcome"],
                   (((k,), v) for k, v in sorted(t.ticks.items())))
    yield _counter(p + "ticks_failed", "Failed ticks by reason.", ["reason"],
                   (((k,), v) for k, v in sorted(t.failed_by_reason.items())))
    h = HistogramMetricFamily(p + "tick_duration_seconds", "Duration of completed ticks.")
    cum, buckets = 0, []
    for b, n in zip((*map(str, DURATION_BUCKETS), "+Inf"), t.durations, strict=True):
        cum += n
        buckets.append((b, float(cum)))
    h.add_metric([], buckets, t.duration_sum)
    yield h
    yield _counter(p + "model_steps", "Model calls answered.", [], [((), t.model_steps)])
    yield _counter(p + "model_tokens", "Tokens the provider reported for the agent's and the summariser's calls, "
                   "by type.", ["type"], (((k,), t.tokens[k]) for k in ("prompt", "cached", "completion")))
    yield _counter(p + "summary_tokens", "The summariser's share of model_tokens, by type.", ["type"],
                   (((k,), t.summary_tokens[k]) for k in ("prompt", "cached", "completion")))
    yield _counter(p + "compactions", "Compactions by method.", ["method"],
                   (((k,), v) for k, v in sorted(t.compactions.items())))
    yield _counter(p + "tool_calls", "Tool calls by tool and outcome.", ["tool", "outcome"],
                   ((k, v) for k, v in sorted(t.tool_calls.items())))
    yield _counter(p + "policy_blocks", "Tool calls refused by policy, by rule.", ["rule"],
                   (((k,), v) for k, v in sorted(t.policy_blocks.items())))
    yield _counter(p + "model_idle_ticks", "Completed ticks in which nothing in the fleet was changed.", [],
                   [((), t.idle_ticks)])


def gauge_metrics(s: State) -> Iterator[Metric]:
    p = "fleet_agent_"
    yield _gauge(p + "request_tokens", "Calibrated tokens of the newest model request.", s.request_tokens)
    yield _gauge(p + "request_budget_tokens", "The request token budget (context.budget_tokens).", s.budget_tokens)
    yield _gauge(p + "fleet_instances", "Instances in the newest observation, by status.", None, ["status"],
                 (((k,), v) for k, v in sorted(s.instances_by_status.items())))
    yield _gauge(p + "fleet_dollars_per_hour", "What our fleet costs per hour (newest observation).", s.fleet_dph)
    yield _gauge(p + "fleet_traffic_dollars_per_hour", "The bandwidth vast.ai bills our running instances per hour on "
                 "top of fleet_dollars_per_hour, as their counters measured it (newest observation).", s.traffic_dph)
    yield _gauge(p + "policy_max_dollars_per_hour", "The fleet's spend-rate cap (policy.max_total_dph).", s.dph_cap)
    yield _gauge(p + "balance_dollars", "The vast.ai balance/credit (newest observation).", s.balance)
    yield _gauge(p + "spend_today_dollars", "Estimated spend since 00:00 UTC.", s.spend["today"])
    yield _gauge(p + "spend_month_dollars", "Estimated spend since the 1st of the month, UTC.", s.spend["month"])
    yield _gauge(p + "alerts_open", "Open alerts by severity.", None, ["severity"],
                 (((k,), v) for k, v in sorted(s.alerts_by_severity.items())))
    yield _gauge(p + "log_last_seq", "The newest event's seq.", s.last_seq)
    yield _gauge(p + "log_size_bytes", "The database's size on disk (with its WAL).", s.log_bytes)
    yield _gauge(p + "last_tick_timestamp_seconds", "Unix time of the newest tick event.", s.last_tick_ts)


def cost_metrics(t: Totals, mc: dict[str, Any]) -> Iterator[Metric]:
    """The model's cost: a counter priced from the tokens counted so far at ``model.price`` (so it restarts
    when the price is changed), the price itself, and the per tick / day / job figures of
    agent.fleet.spend.model_cost (``mc``)."""
    from agent.price import Price

    p = "fleet_agent_"
    rates = mc["price"]
    price = Price(rates["input"], rates["cached_input"], rates["output"])
    parts = price.parts(t.tokens["prompt"], t.tokens["cached"], t.tokens["completion"])
    yield _counter(p + "model_cost_dollars", "What the model calls answered (the agent's and the summariser's) "
                   "cost at model.price, by token type (input = uncached prompt tokens).", ["type"],
                   (((k,), v) for k, v in parts.items()))
    yield _gauge(p + "model_price_dollars_per_million_tokens", "model.price in force, by token type.", None,
                 ["type"], (((k,), float(v)) for k, v in rates.items()))
    yield _gauge(p + "model_cost_per_tick_dollars", "Mean model cost of the newest ticks.", mc.get("per_tick"))
    yield _gauge(p + "model_cost_per_day_dollars", "Model cost a day at the schedule's pace (the fleet's model "
                 "bill).", mc.get("per_day"))
    yield _gauge(p + "model_cost_per_instance_day_dollars", "Model cost a day per instance of ours.",
                 mc.get("per_instance_day"))
    yield _gauge(p + "model_cost_per_job_dollars", "Model cost per job the demand source reports completed, over "
                 "the newest ticks.", mc.get("per_job"))


class LogCollector(Collector):
    """A prometheus_client collector over a console's log: counters folded since the last scrape."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.totals = Totals()
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            state = self.console.metric_state(self.totals)
            yield from counter_metrics(self.totals)
            yield from gauge_metrics(state)
            yield from cost_metrics(self.totals, self._model_cost())

    def _model_cost(self) -> dict[str, Any]:
        from agent.fleet import spend

        with self.console.lock:
            return spend.model_cost(self.console.log, self.console.settings)


def registry_for(collector: LogCollector) -> CollectorRegistry:
    """A registry of its own (never the global one) holding the log collector."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(collector)
    return reg


def db_bytes(path: os.PathLike[str] | str) -> int:
    """The database file plus its WAL."""
    total = 0
    for suffix in ("", "-wal"):
        with contextlib.suppress(OSError):
            total += os.stat(f"{os.fspath(path)}{suffix}").st_size
    return total
