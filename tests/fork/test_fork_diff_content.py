"""fork diff compares content, not shape: a search that showed the model other offers is a different
decision; a rent that got another instance id (the fork's simulator numbers its own) is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.fork.diff import compare, render
from agent.store.log import EventLog
from tests.context.test_context import Clock
from tests.fork.test_fork import origin as origin  # three ticks: a search, a rent, two rents

TABLE = "offer_id | gpu | $/h\n{} | RTX 4090 | 0.41"


def _tick(path: Path, offer: int, instance: int) -> EventLog:
    log = EventLog(path, clock=Clock())
    log.append("tick.started", {"observation": {"instances": []}}, "scheduler", 1)
    calls = [{"id": "c1", "name": "search_offers", "arguments": '{"gpu": "RTX 4090"}'},
             {"id": "c2", "name": "rent_offer", "arguments": '{"offer_id": 7}'}]
    log.append("model.response", {"text": "", "tool_calls": calls, "request_seq": 1}, "model", 1)
    log.append("tool.result", {"call_id": "c1", "name": "search_offers", "ok": True,
                               "output": TABLE.format(offer)}, "tool", 1)
    log.append("tool.result", {"call_id": "c2", "name": "rent_offer", "ok": True, "output": f"rented {instance}",
                               "effect": {"type": "rent", "instance_id": instance}}, "tool", 1)
    log.append("tick.completed", {"steps": 1}, "scheduler", 1)
    return log


def test_a_search_with_other_results_is_different_a_rent_with_another_id_is_not(tmp_path: Path) -> None:
    origin = _tick(tmp_path / "o.db", 7, 101)
    same_market = _tick(tmp_path / "a.db", 7, 202)
    other_market = _tick(tmp_path / "b.db", 8, 101)
    (d,) = compare(origin, same_market, [1])
    assert d.same
    (d,) = compare(origin, other_market, [1])
    assert not d.same
    lines = render([d])
    assert lines[0] == "tick 1: DIFFERENT"
    search = [ln for ln in lines if "search_offers" in ln]
    assert search[0].strip().startswith("step 1   original") and "8 | RTX 4090" not in search[0]
    assert search[1].strip().startswith("fork") and "returned" in search[1]
    assert any("rent_offer" in ln and " same " in ln for ln in lines)


def test_the_forks_market_is_the_one_the_origin_saw(origin: Any) -> None:
    """Every offer the fork's simulator lists unrented is one the origin's model was shown: none of the
    seed's own (cheaper) offers comes first in the fork's first search."""
    from agent.fork import Where, fork_point, open_origin
    from agent.fork.seed import logged_offers, seeded_simulator

    app, _ = origin
    log = open_origin(app.settings)
    try:
        p = fork_point(log, Where(tick=3))
        shown = set(logged_offers(list(log.read(0, until_seq=p.seq, kinds=["tool.called", "tool.result"]))))
        sim, _, _ = seeded_simulator(log, p.seq, p.observation, seed=0, time=p.time, api_key="k")
    finally:
        log.close()
    free = {oid for oid, o in sim.offers.items() if not o.get("rented")}
    assert shown and free and free <= shown
