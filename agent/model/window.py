"""The model server's context window, once the server has said it.

``context.budget_tokens`` is what fleet-agent aims for; the server's window is what it holds. When a
server refuses a request as too long and names its window, ``learn_window`` records it (``model.window``)
and alerts once; from then on ``effective_context`` gives every projection and compaction a budget that
fits the window, so a compaction never produces a thread the server refuses again.
"""

from __future__ import annotations

from dataclasses import replace

from agent import feedback, logsetup
from agent.config import ContextSettings
from agent.store.log import EventLog

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

log_ = logsetup.get_logger(__name__)

KEY_WINDOW = "model:window"


def budget_for(window: int, cs: ContextSettings, max_output_tokens: int) -> int:
    """The largest budget a server with ``window`` tokens holds: the server counts the prompt plus the reply's
    ``max_tokens``, so a ``max_output_tokens`` above the output reserve takes the difference off too."""
    return min(cs.budget_tokens, window - max(0, max_output_tokens - cs.output_reserve))


def _latest(log: EventLog) -> dict[str, Any] | None:
    e = next(iter(log.read(0, kinds=["model.window"], newest_first=True, limit=1)), None)
    return None if e is None else e.payload


def effective_context(log: EventLog, settings: Any) -> ContextSettings:
    """``context:`` with the budget lowered to the server's window when the server has said it is smaller."""
    cs: ContextSettings = settings.context
    latest = _latest(log)
    if latest is None:
        return cs
    budget = budget_for(int(latest["window"]), cs, int(settings.model.max_output_tokens))
    if budget >= cs.budget_tokens:
        return cs
    return replace(cs, budget_tokens=max(budget, 2 * cs.output_reserve + 1))


def learn_window(log: EventLog, settings: Any, window: int, source: str, tick: int | None) -> ContextSettings:
    """Record the server's ``window`` when it lowers the budget in force (``model.window`` and one alert
    naming the fix); return the context settings in force from now on."""
    cs: ContextSettings = settings.context
    before = effective_context(log, settings)
    budget = budget_for(window, cs, int(settings.model.max_output_tokens))
    if budget >= before.budget_tokens:
        return before
    log.append("model.window", {"window": window, "budget_tokens": cs.budget_tokens, "effective_budget": budget,
                                "source": source}, "system", tick)
    log_.warning("model.window", window=window, budget_tokens=cs.budget_tokens, effective_budget=budget,
                 source=source)
    feedback.raise_alert(log, key=KEY_WINDOW, severity="warning",
                         title=f"model server's context window ({window:,} tokens) is smaller than the budget",
                         detail=f"context.budget_tokens is {cs.budget_tokens:,} and model.max_output_tokens "
                                f"{settings.model.max_output_tokens:,}; requests now aim for {budget:,} tokens. Fix: "
                                f"set context.budget_tokens to at most {budget:,}, or start the server with a "
                                "larger window (vLLM --max-model-len, llama.cpp -c, Ollama num_ctx)",
                         tick=tick, settings=settings)
    return effective_context(log, settings)
