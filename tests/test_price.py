"""model.price: presets, rates that override them, the errors a bad price gets, and the dollars of usage."""

from __future__ import annotations

import pytest

from agent import config
from agent.errors import ConfigError
from agent.price import PRESETS, Price, daily_cost, of_settings

FILE = "/etc/fleet-agent/config.yaml"


def _price(model_lines: str) -> Price:
    return of_settings(config.parse("agent_id: f1\nmodel:\n" + model_lines, FILE))


def test_a_preset_by_name_gives_its_list_prices_and_the_sheet():
    p = _price("  name: my-deployment\n  price: gpt-4o-mini\n")
    assert (p.input, p.cached_input, p.output) == PRESETS["gpt-4o-mini"][:3]
    assert "gpt-4o-mini" in p.sheet and "2025-08" in p.sheet and "model.price" in p.sheet


def test_a_rate_given_overrides_the_presets_and_the_rest_stay():
    p = _price("  price:\n    preset: gpt-4.1\n    input: 1.5\n")
    assert (p.input, p.cached_input, p.output) == (1.5, PRESETS["gpt-4.1"][1], PRESETS["gpt-4.1"][2])
    assert "input from model.price" in p.sheet


@pytest.mark.parametrize("name, preset", [("gpt-4.1", "gpt-4.1"), ("openai/gpt-4o", "gpt-4o"),
                                          ("GPT-4o-mini", "gpt-4o-mini")])
def test_unset_the_model_name_picks_the_preset(name, preset):
    p = _price(f"  name: {name}\n")
    assert (p.input, p.cached_input, p.output) == PRESETS[preset][:3]
    assert f"model.name {name!r}" in p.sheet


def test_unset_and_no_preset_is_a_free_local_model():
    for lines in ("  name: qwen2.5-32b-instruct\n", "  name: gpt-4o-2024-05-13\n", "  price: local\n"):
        p = _price(lines)
        assert p.free and p.cost(10_000, 5_000, 300) == 0
    assert _price("  name: qwen2.5-32b-instruct\n").sheet.startswith("local")


def test_rates_alone_price_any_model_and_cached_defaults_to_input():
    p = _price("  name: my-model\n  price: {input: 3, output: 15}\n")
    assert (p.input, p.cached_input, p.output, p.sheet) == (3.0, 3.0, 15.0, "model.price")


@pytest.mark.parametrize("lines, line, fragment", [
    ("  price: gpt-4-o\n", 4, "model.price: 'gpt-4-o' is no preset; did you mean 'gpt-4o'?"),
    ("  price:\n    input: -1\n", 5, "model.price.input: must be between 0 and 1000"),
    ("  price:\n    output: lots\n", 5, "model.price.output: expected a number or null, got 'lots'"),
    ("  price:\n    prompt: 2\n", 5, "model.price.prompt: unknown key"),
    ("  price: 5\n", 4, "model.price: expected a mapping of settings, got 5"),
    ("  name: my-model\n  price: {input: 2}\n", 5, "model.price: output is not set and 'my-model' is no preset"),
    ("  price: {input: 1, cached_input: 2, output: 4}\n", 4, "model.price.cached_input: $2 is above the input"),
])
def test_a_bad_price_names_the_file_and_line(lines, line, fragment):
    with pytest.raises(ConfigError) as e:
        config.parse("agent_id: f1\nmodel:\n  provider: openai\n" + lines, FILE)
    assert str(e.value).startswith(f"{FILE}:{line}: ")
    assert fragment in str(e.value)


def test_cached_tokens_cost_the_cached_rate():
    p = Price(2.0, 0.5, 8.0, "t")
    # 10,000 prompt tokens of which 9,000 cached, 200 completion tokens
    expect = (1_000 * 2.0 + 9_000 * 0.5 + 200 * 8.0) / 1e6
    assert p.cost(10_000, 9_000, 200) == pytest.approx(expect)
    assert sum(p.parts(10_000, 9_000, 200).values()) == pytest.approx(expect)
    assert p.usage_cost({"prompt_tokens": 10_000, "cached_tokens": 9_000, "completion_tokens": 200}) == \
        pytest.approx(expect)
    assert p.usage_cost({"prompt_tokens": 100, "cached_tokens": 400}) == pytest.approx(100 * 0.5 / 1e6)
    assert p.usage_cost(None) == 0


def test_daily_cost_scales_a_runs_usage_to_a_day():
    p = Price(1.0, 0.25, 4.0, "t")
    usage = {"prompt_tokens": 300_000, "cached_tokens": 240_000, "completion_tokens": 3_000}
    d = daily_cost(p, usage, ticks=6, tick_seconds=300)
    per_tick = (60_000 * 1.0 + 240_000 * 0.25 + 3_000 * 4.0) / 1e6 / 6
    assert d["per_tick"] == pytest.approx(per_tick)
    assert d["per_day"] == pytest.approx(per_tick * 288)
    with pytest.raises(ValueError):
        daily_cost(p, usage, ticks=0, tick_seconds=300)


def test_the_rules_provider_is_free():
    s = config.parse("agent_id: f1\nmodel:\n  provider: rules\n  name: gpt-4o\n", FILE)
    assert of_settings(s).free
