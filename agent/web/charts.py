"""Server-rendered SVG: the spend-rate chart, as plain values a template draws (no script, no styles)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

WIDTH, HEIGHT, PAD = 600, 160, 30


@dataclass(frozen=True)
class Chart:
    """A step line of $/h over a window: the polyline points and the axis labels."""

    title: str
    points: str  # "x,y x,y ..." for <polyline points=...>
    y_max: float
    x_labels: list[tuple[float, str]]
    empty: bool
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


def step_chart(title: str, series: list[tuple[float, float]], start: float, end: float) -> Chart:
    """``series`` (unix time, $/h), oldest first, drawn as steps over [start, end]."""
    y_max = max([r for _t, r in series] + [0.01]) * 1.1
    span = max(end - start, 1.0)

    def x(t: float) -> float:
        return round(PAD + (WIDTH - 2 * PAD) * (min(max(t, start), end) - start) / span, 1)

    def y(r: float) -> float:
        return round(HEIGHT - PAD - (HEIGHT - 2 * PAD) * r / y_max, 1)

    pts: list[str] = []
    for i, (t, r) in enumerate(series):
        if i:
            pts.append(f"{x(t)},{y(series[i - 1][1])}")
        pts.append(f"{x(t)},{y(r)}")
    if series:
        pts.append(f"{x(end)},{y(series[-1][1])}")
    fmt = "%H:%M" if span <= 2 * 86400 else "%m-%d"
    labels = [(x(start + span * k / 4), datetime.fromtimestamp(start + span * k / 4, UTC).strftime(fmt))
              for k in range(5)]
    return Chart(title=title, points=" ".join(pts), y_max=round(y_max, 2), x_labels=labels, empty=not series)
