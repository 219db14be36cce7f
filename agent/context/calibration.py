"""Calibration: the smoothed ratio of provider-reported to estimated prompt tokens (pure arithmetic)."""

from __future__ import annotations

import math
from dataclasses import dataclass

CALIBRATION_ALPHA = 0.5    # weight of a new provider observation in the smoothed ratio
CALIBRATION_STEP = 0.02    # record a new ratio only when it moves by more than this share


@dataclass(frozen=True)
class Calibration:
    """Provider-reported / estimated prompt tokens, as last recorded in the log."""

    ratio: float = 1.0
    margin: float = 0.05
    seq: int | None = None

    @property
    def factor(self) -> float:
        return max(1.0, self.ratio) * (1.0 + self.margin)

    def calibrated(self, tokens: int) -> int:
        return math.ceil(tokens * self.factor)

    def raw_limit(self, calibrated_limit: float) -> int:
        """The largest raw estimate whose calibrated value stays <= ``calibrated_limit``."""
        n = max(0, math.floor(calibrated_limit / self.factor))
        while n > 0 and self.calibrated(n) > calibrated_limit:
            n -= 1
        return n


def next_ratio(current: Calibration, estimated: int, reported: int) -> float | None:
    """The smoothed ratio after one provider report, or None when it moves by 2% or less."""
    if estimated <= 0 or reported <= 0:
        return None
    observed = reported / estimated
    new = observed if current.seq is None else (1 - CALIBRATION_ALPHA) * current.ratio + CALIBRATION_ALPHA * observed
    if abs(new - current.ratio) <= CALIBRATION_STEP * current.ratio:
        return None
    return round(new, 4)
