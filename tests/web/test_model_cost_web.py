"""The model's cost on /metrics and on the console's overview, for a log written by real ticks against the
fake OpenAI-compatible server, priced at a hosted model's sheet."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from agent.fleet.spend import model_cost
from agent.price import PRESETS
from agent.runtime.tick import run_tick
from agent.web import Console
from agent.web.routes import create_app
from tests.fakes.openai_server import reply
from tests.fleet.test_model_cost import (
    SMALL_CONTEXT,
    CountingFake,
    _agent_or_summariser,
    _bill,
    _fleet_of_ten,
)


def test_metrics_and_the_overview_show_the_models_cost(make_app, sim, sim_clock):
    with CountingFake() as fake:
        app = make_app(model_server=fake, model={"name": "gpt-4o-mini"}, schedule={"interval": 300})
        for _ in range(3):
            fake.enqueue(reply("looking", tool_calls=[("search_offers", {"limit": 5})]), reply("holding"))
            assert run_tick(app).ok
            sim_clock.advance(300)
        rates = PRESETS["gpt-4o-mini"][:3]
        bill = _bill(fake.sent_usage, rates)
        console = Console(app.settings, env={"VAST_API_KEY": sim.api_key}, clock=sim_clock)
        try:
            with TestClient(create_app(console), base_url="http://127.0.0.1") as client:
                text = client.get("/metrics").text
                page = client.get("/").text
        finally:
            console.close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    by_type = {dict(labels)["type"]: v for (n, labels), v in samples.items()
               if n == "fleet_agent_model_cost_dollars_total"}
    assert set(by_type) == {"input", "cached_input", "output"} and by_type["cached_input"] > 0
    assert sum(by_type.values()) == pytest.approx(bill, rel=1e-9)
    prices = {dict(labels)["type"]: v for (n, labels), v in samples.items()
              if n == "fleet_agent_model_price_dollars_per_million_tokens"}
    assert prices == dict(zip(("input", "cached_input", "output"), rates, strict=True))
    assert samples[("fleet_agent_model_cost_per_day_dollars", ())] == pytest.approx(bill / 3 * 288, rel=0.01)
    assert samples[("fleet_agent_model_cost_per_tick_dollars", ())] == pytest.approx(bill / 3, rel=0.01)
    mc = model_cost(app.log, app.settings)
    assert f'<span id="model-per-day">${mc["per_day"]:.4f}</span>/day' in page
    assert "gpt-4o-mini (OpenAI list prices, 2025-08" in page


@pytest.mark.usefixtures("backend")
def test_metrics_count_the_summarisers_calls(make_app, sim, sim_clock):
    """Ticks that compact through the summariser: /metrics' cost counter is the bill of every usage object the
    server sent, the summariser's included, and fleet_agent_summary_tokens is the summariser's share (on SQLite
    and on PostgreSQL, whose totals query is its own)."""
    with CountingFake() as fake:
        fake.default = _agent_or_summariser
        app = make_app(model_server=fake, model={"name": "gpt-4o-mini"}, context=SMALL_CONTEXT,
                       schedule={"interval": 300}, policy={"max_instances": 12})
        _fleet_of_ten(app, sim)
        for _ in range(8):
            assert run_tick(app).ok
            sim_clock.advance(300)
        assert fake.summary_usage, "no compaction called the summariser"
        rates = PRESETS["gpt-4o-mini"][:3]
        bill = _bill(fake.sent_usage, rates)
        console = Console(app.settings, env={"VAST_API_KEY": sim.api_key}, clock=sim_clock)
        try:
            with TestClient(create_app(console), base_url="http://127.0.0.1") as client:
                text = client.get("/metrics").text
        finally:
            console.close()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}

    def by_type(name: str) -> dict[str, float]:
        return {dict(labels)["type"]: v for (n, labels), v in samples.items() if n == name}

    assert sum(by_type("fleet_agent_model_cost_dollars_total").values()) == pytest.approx(bill, rel=1e-9)
    summary = by_type("fleet_agent_summary_tokens_total")
    assert summary == {"prompt": sum(u["prompt_tokens"] for u in fake.summary_usage),
                       "cached": sum(u["prompt_tokens_details"]["cached_tokens"] for u in fake.summary_usage),
                       "completion": sum(u["completion_tokens"] for u in fake.summary_usage)}
    assert by_type("fleet_agent_model_tokens_total")["prompt"] == sum(u["prompt_tokens"] for u in fake.sent_usage)
    mc = model_cost(app.log, app.settings)
    assert samples[("fleet_agent_model_cost_per_tick_dollars", ())] == pytest.approx(bill / 8, rel=0.01)
    assert mc["summary_calls"] == len(fake.summary_usage)
