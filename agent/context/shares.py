"""How a request's budget is split, and the share the history gets.

The budget holds the output reserve, the fixed blocks (system prompt with the policy, the pinned block, the
summary and its facts, the tool schemas) and the history (the thread since the last compaction). The
watermarks apply to the room the fixed blocks leave, not to the whole budget: a compaction cuts the history
down to ``low_water`` of that room, so a large pinned block or many tool schemas shrink what is kept of the
history instead of leaving it nothing (with ``low_water`` of the whole budget, fixed blocks of 30 % of a
30k budget left the history 0 tokens after every compaction and most of the budget unused on average).
"""

from __future__ import annotations

from typing import Any

from agent.config import ContextSettings

FIXED = ("system", "pinned", "summary", "tools")
PARTS = (*FIXED, "history", "reserve", "free")


def room(settings: ContextSettings, fixed: int) -> int:
    """Tokens the history may use: the budget less the output reserve and the fixed blocks."""
    return max(0, settings.budget_tokens - settings.output_reserve - fixed)


def low_target(settings: ContextSettings, fixed: int) -> float:
    """The request size a compaction cuts down to: the fixed blocks and ``low_water`` of the room they leave."""
    return fixed + settings.low_water * room(settings, fixed)


def split(sections: dict[str, Any], budget: int, reserve: int) -> dict[str, int]:
    """A request's ``sections`` (its manifest's) as the parts of the budget: the fixed blocks, the history,
    the output reserve and what is left free."""
    out = {k: int(sections.get(k) or 0) for k in FIXED}
    out["history"] = int(sections.get("thread") or 0)
    out["reserve"] = reserve
    out["free"] = max(0, budget - sum(out.values()))
    return out


def split_text(parts: dict[str, int], budget: int) -> str:
    """``system 1,830 (6%) · pinned ... · free 9,100 (30%)``."""
    return " · ".join(f"{k} {parts[k]:,} ({100 * parts[k] / budget:.0f}%)" for k in PARTS if k in parts) \
        if budget > 0 else ""
