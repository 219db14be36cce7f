"""vast.ai bills traffic per GB at each host's price on top of ``dph_total``: once the fleet's own instances
have measured what they move an hour, search_offers counts it in each offer's $/job and the rules provider
buys by it, against the real simulator."""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.model import rules
from agent.sim import ManualClock, Simulator
from tests.conftest import events_of
from tests.model.test_rules_sizing import FLEET, ROOMY, _inst, _plan, _ticks


def _rented_offers(app: Any, tick: int) -> list[int]:
    return [e.payload["effect"]["offer_id"] for e in events_of(app, "tool.result", tick)
            if e.payload["name"] == "rent_instance" and e.payload["ok"]]


def test_an_offer_cheap_by_the_hour_but_dear_by_the_gb_is_not_rented_once_the_fleet_has_measured_its_traffic(
        make_app, sim: Simulator, sim_clock: ManualClock) -> None:
    """A fleet of RTX 4090s runs 40 minutes and measures its traffic. Then an offer 10 % cheaper by the hour
    than any other 4090, on a host billing $0.20 per GB, is listed: what the fleet moves would cost more there
    than the 10 %. The search shows each offer's traffic $/h and counts it in $/job, and the next rent for a
    backlog takes other 4090s, not that one (by $/h alone it was the best buy on offer)."""
    sim.pending = 40.0
    app = make_app(provider="rules", policy={**ROOMY, "allowed_gpus": ["RTX 4090"]}, fleet=FLEET)
    _ticks(app, sim, sim_clock, 8)
    running = [i for i in sim.instances.values() if i["actual_status"] == "running"]
    assert running and sum(i["inet_down_billed"] for i in running) > 0
    for _ in range(3):  # more 4090s to choose from, on hosts that bill no traffic
        o = sim.offers[sim.market.add_offer("RTX 4090")]
        o["inet_up_cost"] = o["inet_down_cost"] = 0.0
    taken = {i["_offer_id"] for i in sim.instances.values()}
    free = [o for o in sim.offers.values() if o["gpu_name"] == "RTX 4090" and o["num_gpus"] == 1
            and o["id"] not in taken and o["host_id"] not in sim.bad_hosts and o["disk_space"] >= FLEET["disk_gb"]]
    trap = sim.offers[sim.market.add_offer("RTX 4090", dph=0.9 * min(o["dph_base"] for o in free))]
    trap["inet_up_cost"] = trap["inet_down_cost"] = 0.20
    sim.pending = 85.0  # a backlog two more 4090s cover
    n = len(events_of(app, "tick.started")) + 1
    _ticks(app, sim, sim_clock, 1)

    [search] = [e.payload["output"] for e in events_of(app, "tool.result", n) if e.payload["name"] == "search_offers"]
    header, *rows = search.splitlines()
    assert header.endswith("| traffic $/h") and "GB/h up and" in search, search
    [row] = [r for r in rows if r.startswith(f"{trap['id']} |")]
    cells = [c.strip() for c in row.split("|")]
    traffic = float(cells[-1])
    assert traffic > 0.1 * trap["dph_total"], row  # more than the 10 % it saves by the hour
    assert float(cells[7]) > float(cells[2]) / float(cells[6]), row  # $/job counts it
    rented = _rented_offers(app, n)
    assert rented and trap["id"] not in rented, (rented, search)


def test_an_instance_whose_measured_traffic_makes_it_dear_per_job_is_swapped_and_then_goes_as_surplus():
    """Three RTX 4090s; the cheapest by the hour ($0.31) was rented before any traffic was measured, on a host
    whose bandwidth now bills $0.90/h. With its traffic it costs 3x the fleet's cheapest per job: the half-hourly
    look replaces it (a 4090 at $0.38/h plus $0.01/h of traffic, under 0.6x its $1.21/h), and once the cover
    counts, it is the one that goes as surplus. By $/h alone it was the fleet's cheapest: nothing was swapped,
    and the surplus was a $0.38 4090."""
    rates = rules._Rates(8.0, {"RTX 4090": 8.0}, frozenset(), True)
    live = [_inst(1, "RTX 4090", 0.31), _inst(2, "RTX 4090", 0.38), _inst(3, "RTX 4090", 0.38)]
    blind = dataclasses.replace(_plan(live, 21.0), tp=rates, capacity=24.0)
    assert rules._first_step(blind)[0] == []  # $/h alone: nothing dear
    plan = dataclasses.replace(blind, traffic={1: 0.9})
    calls, text = rules._first_step(plan)
    assert [c[0] for c in calls] == ["search_offers"] and "#1 costs $1.210/h" in text, text
    assert "3.2× the fleet's cheapest per job" in text, text
    head = "offer_id | gpu | $/h | reliability | host | location | jobs/h | $/job | dlperf | contract | traffic $/h"
    row = "11 | RTX 4090 x1 | 0.380 | 0.990 | 5 | Texas, US | 8.0 | 0.0488 | 62.0 | ends in 30 d | 0.010"

    class R:
        payload = {"name": "search_offers", "ok": True, "output": "\n".join([head, row])}

    calls, text = rules._rent_step(plan, [R()])
    assert [c[1]["offer_id"] for c in calls] == [11] and calls[0][1]["reason"].startswith("replace #1 "), calls
    after = [*live, _inst(11, "RTX 4090", 0.38)]
    assert [i["id"] for i in rules._surplus(dataclasses.replace(plan, live=after, capacity=32.0))] == [1]
    assert [i["id"] for i in rules._surplus(dataclasses.replace(blind, live=after, capacity=32.0))] != [1]
