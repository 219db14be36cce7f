"""The rules provider's bidding policy (agent/model/bidding.py): outbid instances neither dead nor capacity, no
headroom kept for outbids, old on-demand instances swapped for cheaper bids, and bids spread."""

from __future__ import annotations

from typing import Any

from agent.model import bidding, rules
from agent.model.rules import RulesProvider


def _rec(iid: int, status: str = "running", bid: float | None = 0.3, **kw: Any) -> dict[str, Any]:
    rec = {"id": iid, "ours": True, "gpu_name": "RTX 4090", "num_gpus": 1, "dph": bid or 1.0, "status": status,
           "status_msg": "outbid: the market's min_bid is above this instance's bid" if status == "stopped" else None,
           "host_id": 100 + iid, "age_s": 600.0, "label": f"fa-x-{iid}", "restarts": 0, **kw}
    if bid is not None:
        rec["bid"] = bid
    return rec


def _obs(instances: list[dict[str, Any]], rate: float = 48.0) -> dict[str, Any]:
    return {"time": 0, "instances": instances, "demand": {"pending": 0, "arrival_rate_per_h": rate},
            "gpu_models": {}}


def test_the_plan_keeps_outbid_instances_out_of_dead_and_capacity_and_adds_no_headroom(make_app):
    app = make_app(provider="rules", policy={"interruptible": True, "jobs_per_hour_by_gpu": {"RTX 4090": 8.0}})
    for n in range(4):  # a bid fleet of four, #4 outbid in the last of four observations
        four = _rec(4, "stopped" if n == 3 else "running")
        app.log.append("tick.started", {"observation": _obs([_rec(1), _rec(2), _rec(3), four])}, "scheduler")
    plan = RulesProvider(app)._plan(_obs([_rec(1), _rec(2), _rec(3), _rec(4, "stopped")], rate=100.0))
    assert [i["id"] for i in plan.outbid] == [4] and plan.dead == [] and len(plan.live) == 3
    assert plan.capacity == 24.0  # the outbid one does not count
    assert plan.need == 100.0 and rules._short(plan) > 0  # the gap it leaves is covered; nothing kept above need
    assert "1 outbid, waiting for the market to fall back" in plan.why() and "headroom" not in plan.why()


def _inst(iid: int, gpu: str, dph: float, age_s: float, bid: float | None = None) -> dict[str, Any]:
    i = {"id": iid, "gpu_name": gpu, "num_gpus": 1, "dph": dph, "status": "running", "host_id": iid, "age_s": age_s}
    if bid is not None:
        i["bid"] = bid
    return i


def _plan(live: list[dict[str, Any]], need: float) -> rules._Plan:
    rates = rules._Rates(8.0, {"RTX 4090": 8.0, "RTX 3090": 4.0}, frozenset())
    capacity = sum(rates.per_instance(i["gpu_name"], 1) for i in live)
    return rules._Plan(banned=set(), avoid=set(), cap=8, dead=[], live=live, pending=0, rate=need, need=need,
                       capacity=capacity, drain_h=1.0, tp=rates, flapping=set(), rents_left=6, max_dph=12.0,
                       keep=need, interruptible=True)


class _Search:
    def __init__(self, rows: list[str]) -> None:
        head = "offer_id | gpu | $/h | reliability | host | location | jobs/h | $/job"
        self.payload = {"name": "search_offers", "ok": True, "output": "\n".join([head, *rows])}


def test_an_on_demand_instance_older_than_an_hour_is_swapped_for_bids_under_85_percent_of_it():
    od = _inst(1, "RTX 4090", 0.50, age_s=4000)
    plan = _plan([od, _inst(2, "RTX 4090", 0.30, 4000, bid=0.30)], 16.0)
    calls, text = rules._first_step(plan)
    assert calls == [("search_offers", bidding.swap_search(rules.MAX_GPUS))] and "to replace it" in text, text
    assert calls[0][1]["interruptible"] is True
    calls, text = rules._rent_step(plan, [_Search(["11 | RTX 4090 x1 | 0.410 | 0.990 | 5 | Texas, US | 8.0 | 0.0513",
                                                   "12 | RTX 4090 x1 | 0.440 | 0.990 | 6 | Texas, US | 8.0 | 0.0550"])])
    assert [c[1]["offer_id"] for c in calls] == [11] and "replace #1" in calls[0][1]["reason"], (calls, text)
    calls, text = rules._rent_step(plan, [_Search(["12 | RTX 4090 x1 | 0.440 | 0.990 | 6 | Texas, US | 8.0 | 0.0550"])])
    assert calls == [] and "keeping it" in text, text  # 0.44 is not under 85 % of 0.50


def test_a_swap_covers_what_the_fleet_needs_of_the_instance_not_all_it_delivers():
    od = _inst(1, "RTX 4090", 0.50, age_s=4000)  # 8 jobs/h, of which the fleet needs 5: the bid beside it covers 8 of 13
    plan = _plan([od, _inst(2, "RTX 4090", 0.30, 4000, bid=0.30)], 13.0)
    calls, text = rules._first_step(plan)
    assert "for the 5.0 of its 8.0 jobs/h the fleet needs" in text, text
    calls, text = rules._rent_step(plan, [_Search(["11 | RTX A6000 x1 | 0.300 | 0.990 | 5 | Texas, US | 6.0 | 0.0500"])])
    assert [c[1]["offer_id"] for c in calls] == [11] and "replace #1" in calls[0][1]["reason"], (calls, text)


def test_no_swap_for_a_young_on_demand_instance_or_with_bids_off():
    young = _plan([_inst(1, "RTX 4090", 0.50, age_s=1800)], 8.0)
    assert rules._first_step(young)[0] == []
    off = rules._Plan(**{**young.__dict__, "live": [_inst(1, "RTX 4090", 0.50, 4000)], "interruptible": False})
    assert rules._first_step(off)[0] == []


def _bid_rows(*rows: tuple[int, str, float, int, float]) -> _Search:
    """search_offers rows with bids on (offer, GPU, $/h, host, jobs/h): min_bid, on-demand $/h and type columns."""
    out = _Search([f"{oid} | {gpu} | {dph:.3f} | 0.990 | {host} | Texas, US | {jph:.1f} | {dph / jph:.4f} | "
                   f"{dph / 1.05:.4f} | {2 * dph:.3f} | bid | 10.0 | no end date" for oid, gpu, dph, host, jph in rows])
    out.payload["output"] = out.payload["output"].replace(
        "$/job", "$/job | min_bid | on-demand $/h | type | dlperf | contract", 1)
    return out


def test_no_bid_instance_is_rented_to_carry_most_of_the_need_so_one_outbid_does_not_take_the_fleet():
    plan = rules._Plan(**{**_plan([], 36.0).__dict__, "cap": 12, "rents_left": 12,
                          "tp": rules._Rates(8.0, {"RTX 4090": 8.0, "RTX 3090": 4.0, "A100 SXM4": 13.5},
                                             frozenset({"RTX 4090", "RTX 3090", "A100 SXM4"}))})
    search = _bid_rows((21, "A100 SXM4 x2", 0.970, 21, 27.0),  # cheapest per job, but 75 % of the need on one bid
                       *[(30 + n, "RTX 4090 x1", 0.300, 30 + n, 8.0) for n in range(4)],
                       *[(40 + n, "RTX 3090 x1", 0.160, 40 + n, 4.0) for n in range(6)])
    calls, text = rules._rent_step(plan, [search])
    rented = [c[1]["offer_id"] for c in calls]
    assert rented and 21 not in rented and "spread (no instance over" in text, (calls, text)
    jph = {21: 27.0, **{30 + n: 8.0 for n in range(4)}, **{40 + n: 4.0 for n in range(6)}}
    assert sum(jph[o] for o in rented) >= 36.0, (calls, text)
    # one GPU model's bids (their market moves as one) carry at most MAX_MODEL_SHARE of the need
    assert sum(jph[o] for o in rented if o < 40) <= bidding.MAX_MODEL_SHARE * 36.0, (calls, text)
    # where the market allows: the big bid alone on offer is still rented rather than leaving the fleet short
    calls, text = rules._rent_step(plan, [_bid_rows((21, "A100 SXM4 x2", 0.900, 21, 27.0),
                                                    (22, "A100 SXM4 x2", 0.950, 22, 27.0))])
    assert [c[1]["offer_id"] for c in calls] == [21, 22], (calls, text)
    # spreading is insurance worth a little: not a third more per job for as long as the fleet runs
    cheap = _bid_rows((21, "A100 SXM4 x2", 0.600, 21, 27.0), *[(30 + n, "RTX 4090 x1", 0.300, 30 + n, 8.0)
                                                              for n in range(4)])
    assert 21 in [c[1]["offer_id"] for c in rules._rent_step(plan, [cheap])[0]]


def test_small_bids_are_replaced_together_when_one_cover_of_them_all_saves_and_none_alone_does():
    small = [_inst(n, "RTX 3090", 0.17, 4000, bid=0.17) for n in (1, 2, 3)]  # 12 jobs/h for $0.51/h, 11 needed
    plan = rules._Plan(**{**_plan(small, 11.0).__dict__, "tp": rules._Rates(8.0, {"RTX 4090": 8.0, "RTX 3090": 4.0},
                                                                             frozenset(), informed=True)})
    box = _bid_rows((21, "RTX 4090 x2", 0.30, 5, 16.0))  # dearer than any one of them, under 85 % of all three
    calls, text = rules._rent_step(plan, [box])
    assert [c[1]["offer_id"] for c in calls] == [21], text
    assert "replace #3, #2, #1 ($0.510/h, 12.0 jobs/h, 11.0 needed)" in calls[0][1]["reason"], calls
    assert "which go once they count" in text
    alone = rules._Plan(**{**plan.__dict__, "live": small[:1], "capacity": 4.0, "need": 3.0, "keep": 3.0})
    assert rules._rent_step(alone, [box])[0] == []  # one of them alone: the box costs more than it
    # every jobs/h the flat prior (nothing measured, nothing configured): the box's a guess, as good as the three
    guess = rules._Plan(**{**plan.__dict__, "tp": rules._Rates(8.0, {}, frozenset()), "capacity": 24.0, "need": 22.0,
                           "keep": 22.0})
    big = _bid_rows((22, "RTX 4090 x4", 0.30, 5, 32.0))
    assert [c[1]["offer_id"] for c in rules._rent_step(rules._Plan(**{**guess.__dict__, "tp": plan.tp, "need": 11.0,
                                                                      "keep": 11.0, "capacity": 12.0}), [big])[0]] == [22]
    assert rules._rent_step(guess, [big])[0] == []  # not a bet of three instances on a guess
