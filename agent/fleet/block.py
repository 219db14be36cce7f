"""What a guardrail says when it refuses a call, and how GPU model names compare.

The small vocabulary every check of agent/fleet shares (policy, spend, steering), so none of them
imports another to say "blocked".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Block:
    rule: str
    detail: str

    def message(self) -> str:
        return f"blocked by policy: {self.rule} ({self.detail})"


def norm_gpu(name: str | None) -> str:
    return (name or "").replace("_", " ").strip().lower()
