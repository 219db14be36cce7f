"""What the model costs: a price sheet ($ per million tokens) and the dollars of the usage servers report.

A call costs its uncached prompt tokens at the input rate, the prompt tokens the server served from its
prefix cache (``prompt_tokens_details.cached_tokens``) at the cached rate, and its completion tokens at
the output rate. Everything priced is what the server reported (agent.model.llm.Usage, stored in each
``model.response``); nothing is estimated.

``model.price`` names a preset (``PRESETS``: hosted models' list prices, as published on ``SHEET_DATE``),
gives the three rates, or both (a rate given overrides the preset's). Unset, the preset named like
``model.name`` applies when there is one, else the model is local and costs nothing. Prices change:
check the provider's page, and write the rates out when they differ.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SHEET_DATE = "2025-08"
"""When the presets' list prices were read off the providers' pricing pages."""

MILLION = 1_000_000


@dataclass(frozen=True)
class Price:
    """Dollars per million tokens: uncached input, cached input, output; ``sheet`` says where they come from."""

    input: float
    cached_input: float
    output: float
    sheet: str = "local"

    @property
    def free(self) -> bool:
        return self.input == self.cached_input == self.output == 0

    def cost(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> float:
        """Dollars of one call's (or a sum of calls') reported usage. Cached tokens are part of the prompt
        tokens (as servers report them); more cached than prompt tokens counts the prompt as all cached."""
        cached = min(max(0, cached_tokens), max(0, prompt_tokens))
        return ((max(0, prompt_tokens) - cached) * self.input + cached * self.cached_input
                + max(0, completion_tokens) * self.output) / MILLION

    def parts(self, prompt_tokens: int, cached_tokens: int, completion_tokens: int) -> dict[str, float]:
        """``cost`` by part: uncached input, cached input, output (dollars)."""
        cached = min(max(0, cached_tokens), max(0, prompt_tokens))
        return {"input": (max(0, prompt_tokens) - cached) * self.input / MILLION,
                "cached_input": cached * self.cached_input / MILLION,
                "output": max(0, completion_tokens) * self.output / MILLION}

    def usage_cost(self, usage: Mapping[str, Any] | None) -> float:
        """``cost`` of a stored usage object (``{"prompt_tokens", "cached_tokens", "completion_tokens"}``)."""
        u = usage or {}
        return self.cost(_int(u.get("prompt_tokens")), _int(u.get("cached_tokens")), _int(u.get("completion_tokens")))

    def describe(self) -> str:
        """One line: the sheet and its three rates."""
        if self.free:
            return f"{self.sheet}: $0 (a local model)"
        return (f"{self.sheet}: ${self.input:g} input, ${self.cached_input:g} cached input, ${self.output:g} output "
                "per million tokens")


def _int(v: Any) -> int:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0


_OPENAI = f"OpenAI list prices, {SHEET_DATE}"
_ANTHROPIC = f"Anthropic list prices, {SHEET_DATE}; cached = cache reads (cache writes are not modelled)"

PRESETS: dict[str, tuple[float, float, float, str]] = {
    # name: (input, cached input, output) in $ per million tokens, and the sheet
    "gpt-4o": (2.50, 1.25, 10.00, _OPENAI),
    "gpt-4o-mini": (0.15, 0.075, 0.60, _OPENAI),
    "gpt-4.1": (2.00, 0.50, 8.00, _OPENAI),
    "gpt-4.1-mini": (0.40, 0.10, 1.60, _OPENAI),
    "gpt-4.1-nano": (0.10, 0.025, 0.40, _OPENAI),
    "o3": (2.00, 0.50, 8.00, _OPENAI),
    "o4-mini": (1.10, 0.275, 4.40, _OPENAI),
    "gpt-5": (1.25, 0.125, 10.00, _OPENAI),
    "gpt-5-mini": (0.25, 0.025, 2.00, _OPENAI),
    "gpt-5-nano": (0.05, 0.005, 0.40, _OPENAI),
    # Claude through an OpenAI-compatible gateway that reports cache reads as cached_tokens
    "claude-opus-4": (15.00, 1.50, 75.00, _ANTHROPIC),
    "claude-sonnet-4": (3.00, 0.30, 15.00, _ANTHROPIC),
    "claude-3-7-sonnet": (3.00, 0.30, 15.00, _ANTHROPIC),
    "claude-3-5-haiku": (0.80, 0.08, 4.00, _ANTHROPIC),
    "local": (0.0, 0.0, 0.0, "local"),
}


def preset_named(model_name: str) -> str | None:
    """The preset a model name is priced by: itself, or without a gateway's ``vendor/`` prefix; None when
    there is none (a dated snapshot such as gpt-4o-2024-05-13 can have another price: name it in
    ``model.price``)."""
    name = model_name.strip().lower()
    for cand in (name, name.rsplit("/", 1)[-1]):
        if cand in PRESETS:
            return cand
    return None


def resolve(preset: str | None, input: float | None, cached_input: float | None, output: float | None,  # noqa: A002
            model_name: str) -> Price:
    """The price in force. ``preset`` None: the one named like ``model_name``, if any. Rates given
    override the preset's; with no preset, input and output must both be given (the caller checks) and
    cached input defaults to input (no discount). Nothing at all: local, $0."""
    name = preset if preset is not None else preset_named(model_name)
    given = [k for k, v in (("input", input), ("cached_input", cached_input), ("output", output)) if v is not None]
    if name is None:
        if not given:
            return Price(0.0, 0.0, 0.0, f"local ($0: model.price is not set and {model_name!r} is no preset)")
        i, o = float(input or 0.0), float(output or 0.0)
        return Price(i, float(cached_input) if cached_input is not None else i, o, "model.price")
    pi, pc, po, sheet = PRESETS[name]
    how = "model.price" if preset is not None else f"model.name {model_name!r}"
    label = f"{name} ({sheet}; from {how})"
    if given:
        label += f", {', '.join(given)} from model.price"
    return Price(pi if input is None else float(input), pc if cached_input is None else float(cached_input),
                 po if output is None else float(output), label)


def of_settings(settings: Any) -> Price:
    """The price of ``settings.model`` (a ``Settings``); the rules provider is free."""
    m = settings.model
    if m.provider == "rules":
        return Price(0.0, 0.0, 0.0, "local ($0: the rules provider)")
    p = m.price
    return resolve(p.preset, p.input, p.cached_input, p.output, m.name)


def daily_cost(price: Price, usage: Mapping[str, Any], ticks: int, tick_seconds: float) -> dict[str, float]:
    """A run's usage as dollars per tick and per day: ``usage`` sums ``prompt_tokens``, ``cached_tokens``
    and ``completion_tokens`` over ``ticks`` ticks, one every ``tick_seconds``. For benches (bench/context.py)
    and tests that drive ticks and want the bill they would make."""
    if ticks <= 0 or tick_seconds <= 0:
        raise ValueError("ticks and tick_seconds must be above 0")
    per_tick = price.usage_cost(usage) / ticks
    return {"per_tick": per_tick, "per_day": per_tick * 86400.0 / tick_seconds}
