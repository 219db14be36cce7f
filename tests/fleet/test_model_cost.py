"""What the model costs, end to end: real ticks against the simulator and the fake OpenAI-compatible server
(real SDK, real SQLite log), priced at a hosted model's sheet, against a count made from the usage fields the
server sent."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agent.cli import build_parser
from agent.cli.status import format_text
from agent.config import PriceSettings
from agent.events import stored_payload
from agent.events.canonical import canonical
from agent.fleet.spend import model_cost
from agent.price import PRESETS
from agent.runtime import status
from agent.runtime.tick import run_tick
from agent.store.log import GENESIS, EventLog, row_hash
from tests.conftest import plant_ours
from tests.fakes.openai_server import FakeOpenAI, Step, is_summary_request, reply, summary_reply

INTERVAL = 300
TICKS = 6


@dataclass
class CountingFake(FakeOpenAI):
    """The fake server, keeping the usage object of every completion it sends."""

    sent_usage: list[dict[str, Any]] = field(default_factory=list, init=False)
    summary_usage: list[dict[str, Any]] = field(default_factory=list, init=False)  # of the summariser's calls
    _summary_next: bool = field(default=False, init=False)

    def _next_step(self, body: Any) -> Step:
        self._summary_next = is_summary_request(body)
        return super()._next_step(body)

    def completion_body(self, step: Step, usage: dict[str, Any]) -> dict[str, Any]:
        body = super().completion_body(step, usage)
        self.sent_usage.append(body["usage"])
        if self._summary_next:
            self.summary_usage.append(body["usage"])
        return body


@pytest.fixture
def counting_model():
    with CountingFake() as fake:
        yield fake


def _bill(usages: list[dict[str, Any]], rates: tuple[float, float, float]) -> float:
    """Dollars of the server's usage fields: uncached prompt, cached prompt, completion tokens."""
    i, c, o = rates
    total = 0.0
    for u in usages:
        cached = u["prompt_tokens_details"]["cached_tokens"]
        total += (u["prompt_tokens"] - cached) * i + cached * c + u["completion_tokens"] * o
    return total / 1e6


def _fleet_of_ten(app, sim) -> list[int]:
    """Ten instances of ours on hosts that behave (any GPU: the policy's list is not the point here)."""
    offers = [o for o in sorted(sim.offers.values(), key=lambda o: (o["dph_total"], o["id"]))
              if not o["rented"] and o["host_id"] not in sim.bad_hosts and o["disk_space"] >= app.settings.fleet.disk_gb]
    ids = [plant_ours(app, sim, o["id"], key=f"c0ffee{n:06x}") for n, o in enumerate(offers[:10])]
    assert len(ids) == 10
    sim.advance(900)
    return ids


def test_dollars_a_day_of_a_ten_instance_fleet_match_the_servers_usage_within_one_percent(
        sim, make_app, counting_model, capsys):
    """Six ticks with two model calls each against a fleet of ten instances, priced at gpt-4.1's sheet:
    the $/day status prints, and its $/tick and $/job, are within 1 % of the bill counted from the usage
    objects the server sent (cached tokens at the cached rate) and the jobs the queue completed."""
    sim.pending = 400.0
    app = make_app(model_server=counting_model, model={"name": "gpt-4.1"},
                   schedule={"interval": INTERVAL}, policy={"max_instances": 12})
    _fleet_of_ten(app, sim)
    completed = []
    for _ in range(TICKS):
        counting_model.enqueue(reply("looking", tool_calls=[("search_offers", {"limit": 5})]), reply("holding"))
        completed.append(int(sim.completed))
        r = run_tick(app)
        assert r.ok, r.reason
        sim.advance(INTERVAL)
    completed.append(int(sim.completed))  # what the next observation would say; the window ends at the last start

    usages = counting_model.sent_usage
    assert len(usages) == 2 * TICKS
    assert sum(u["prompt_tokens_details"]["cached_tokens"] for u in usages) > 0  # the cached rate is exercised
    rates = PRESETS["gpt-4.1"][:3]
    bill = _bill(usages, rates)
    per_tick = bill / TICKS
    per_day = per_tick * 86400 / INTERVAL

    mc = model_cost(app.log, app.settings)
    assert mc["ticks"] == TICKS and mc["calls"] == 2 * TICKS and mc["instances"] == 10
    assert mc["per_day"] == pytest.approx(per_day, rel=0.01)
    assert mc["per_tick"] == pytest.approx(per_tick, rel=0.01)
    assert mc["per_instance_day"] == pytest.approx(per_day / 10, rel=0.01)
    jobs = completed[TICKS - 1] - completed[0]
    assert jobs > 0
    assert mc["jobs"] == jobs
    assert mc["per_job"] == pytest.approx(_bill(usages[:-2], rates) / jobs, rel=0.01)

    text = format_text(status.collect(app))
    shown = re.search(r"model cost: \$([\d,.]+)/day", text)
    assert shown is not None, text
    assert float(shown.group(1).replace(",", "")) == pytest.approx(per_day, rel=0.01)
    assert "model price: gpt-4.1 (OpenAI list prices, 2025-08; from model.name 'gpt-4.1')" in text

    args = build_parser().parse_args(["spend"])
    assert args.func(args, app) == 0
    out = capsys.readouterr().out
    shown = re.search(r"model cost: \$([\d,.]+)/day", out)
    assert shown is not None, out
    assert float(shown.group(1).replace(",", "")) == pytest.approx(per_day, rel=0.01)


# A request budget small enough that ticks of a ten-instance fleet compact, with summaries written by the
# summariser (through the same fake server) rather than masking alone.
SMALL_CONTEXT = {"budget_tokens": 9000, "output_reserve": 600, "high_water": 0.6, "low_water": 0.3,
                 "tool_output_max_tokens": 700, "summary_max_tokens": 600, "pinned_max_tokens": 1500,
                 "mask_after_ticks": 0}
COMPACTING_TICKS = 12


def _agent_or_summariser(body: dict[str, Any]) -> Step:
    """Search offers once a tick, then hold; asked for the rolling summary, write one that passes the check."""
    if is_summary_request(body):
        return summary_reply(body)
    if body["messages"][-1]["role"] == "tool":
        return reply("holding")
    return reply("looking", tool_calls=[("search_offers", {"limit": 20})])


def test_the_summarisers_calls_are_in_the_bill_within_one_percent(sim, make_app, counting_model):
    """Ticks of a ten-instance fleet under a small request budget, so the summariser runs (through the fake
    server) in some of them: the $/day, $/tick and $/job model_cost gives are within 1 % of the bill counted
    from every usage object the server sent, the summariser's included, and its share is the summariser's
    calls' own bill."""
    sim.pending = 400.0
    counting_model.default = _agent_or_summariser
    app = make_app(model_server=counting_model, model={"name": "gpt-4.1"}, context=SMALL_CONTEXT,
                   schedule={"interval": INTERVAL}, policy={"max_instances": 12})
    _fleet_of_ten(app, sim)
    completed, calls = [], []
    for _ in range(COMPACTING_TICKS):
        completed.append(int(sim.completed))
        calls.append(len(counting_model.sent_usage))
        r = run_tick(app)
        assert r.ok, r.reason
        sim.advance(INTERVAL)

    summaries = counting_model.summary_usage
    assert summaries, "no compaction called the summariser: lower SMALL_CONTEXT's budget"
    answered = [e for e in app.log.read(0, kinds=["summary.response"]) if e.payload.get("text")]
    assert len(answered) == len(summaries) and all(e.version == 2 for e in answered)
    assert [e.payload["usage"] for e in answered] == [
        {"prompt_tokens": u["prompt_tokens"], "completion_tokens": u["completion_tokens"],
         "cached_tokens": u["prompt_tokens_details"]["cached_tokens"]} for u in summaries]

    usages = counting_model.sent_usage
    rates = PRESETS["gpt-4.1"][:3]
    bill = _bill(usages, rates)
    assert _bill(summaries, rates) > 0.05 * bill  # the summariser's share is large enough to be missed
    per_tick = bill / COMPACTING_TICKS
    mc = model_cost(app.log, app.settings)
    assert mc["ticks"] == COMPACTING_TICKS and mc["calls"] == len(usages)
    assert mc["summary_calls"] == len(summaries)
    assert mc["summary_cost"] == pytest.approx(_bill(summaries, rates), rel=0.01)
    assert mc["per_tick"] == pytest.approx(per_tick, rel=0.01)
    assert mc["per_day"] == pytest.approx(per_tick * 86400 / INTERVAL, rel=0.01)
    jobs = completed[-1] - completed[0]
    assert jobs > 0 and mc["jobs"] == jobs
    assert mc["per_job"] == pytest.approx(_bill(usages[:calls[-1]], rates) / jobs, rel=0.01)
    last = _bill(usages[calls[-1]:], rates)
    assert mc["last_tick"]["cost"] == pytest.approx(last, rel=0.01)


def test_a_log_written_before_summary_usage_verifies_and_its_summaries_cost_nothing(sim, make_app, counting_model,
                                                                                   capsys):
    """The same kind of run, its ``summary.response`` rows then stored as v1 wrote them (no usage), chained
    into a fresh log: ``replay --verify`` passes on it as on the v2 log, and model_cost prices the agent's
    calls only (the summariser's usage is unknown there, not guessed)."""
    counting_model.default = _agent_or_summariser
    app = make_app(model_server=counting_model, model={"name": "gpt-4.1"}, context=SMALL_CONTEXT,
                   schedule={"interval": INTERVAL}, policy={"max_instances": 12})
    _fleet_of_ten(app, sim)
    for _ in range(8):
        assert run_tick(app).ok
        sim.advance(INTERVAL)
    assert counting_model.summary_usage, "no compaction called the summariser"
    args = build_parser().parse_args(["replay", "--verify"])
    assert args.func(args, app) == 0
    rows, prev = [], GENESIS
    for e in app.log.read(0):
        payload, version = e.payload, e.version
        if e.kind == "summary.response":
            payload, version = {k: v for k, v in e.payload.items() if k != "usage"}, 1
        row = dataclasses.replace(e, payload=payload, version=version, prev_hash=prev)
        h = row_hash(e.seq, e.id, e.ts, e.kind, version, e.source, e.tick, canonical(stored_payload(row)),
                     e.tokens, prev)
        rows.append(dataclasses.replace(row, hash=h))
        prev = h
    db = Path(app.settings.db_file)
    app.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    old = EventLog(db)
    old.adopt(rows)
    old.close()

    assert {e.version for e in app.log.read(0, kinds=["summary.response"])} == {1}
    capsys.readouterr()
    assert args.func(args, app) == 0, capsys.readouterr()
    mc = model_cost(app.log, app.settings)
    agent_calls = len(counting_model.sent_usage) - len(counting_model.summary_usage)
    assert mc["calls"] == agent_calls and mc["summary_calls"] == 0 and mc["summary_cost"] == 0
    rates = PRESETS["gpt-4.1"][:3]
    agent_bill = _bill(counting_model.sent_usage, rates) - _bill(counting_model.summary_usage, rates)
    assert mc["cost"] == pytest.approx(agent_bill, rel=0.01)


def test_an_explicit_rate_overrides_the_preset_and_a_local_model_costs_nothing(sim, make_app, counting_model):
    """The same ticks priced with model.price's own output rate, then as a local model."""
    app = make_app(model_server=counting_model, model={"name": "gpt-4o", "price": PriceSettings(output=100.0)},
                   schedule={"interval": INTERVAL})
    for _ in range(2):
        counting_model.enqueue(reply("holding"))
        assert run_tick(app).ok
        sim.advance(INTERVAL)
    i, c, _ = PRESETS["gpt-4o"][:3]
    mc = model_cost(app.log, app.settings)
    assert mc["per_tick"] == pytest.approx(_bill(counting_model.sent_usage, (i, c, 100.0)) / 2, rel=0.01)
    assert mc["price"] == {"input": i, "cached_input": c, "output": 100.0}

    local = make_app(model_server=counting_model, model={"name": "qwen2.5-32b-instruct"})
    lc = model_cost(local.log, local.settings)
    assert lc["free"] and lc["per_day"] == 0 and lc["calls"] == mc["calls"]
    assert "model price: local ($0" in format_text(status.collect(local))


@pytest.mark.parametrize("cron, interval, per_day", [(None, 300, 288), (None, 3600, 24), ("*/10 * * * *", 300, 144),
                                                     ("0 9-17 * * *", 300, 9)])
def test_ticks_a_day_follow_the_schedule(cron, interval, per_day):
    from datetime import UTC, datetime

    from agent.config import ScheduleSettings
    from agent.fleet.spend import ticks_per_day

    monday = datetime(2026, 12, 7, 0, 0, tzinfo=UTC)
    assert ticks_per_day(ScheduleSettings(interval=interval, cron=cron), monday) == per_day
