"""vast.ai bills bandwidth per GB on top of ``dph_total``, and the credit pays for both. The runway the
observation states and the low-credit alert's "credit lasts ... at $X/h" count the traffic the fleet's own
instances were measured to bill, judged against the simulator's own billing rates."""

from __future__ import annotations

import re
from typing import Any

from agent.cli.status import format_text
from agent.events import render
from agent.runtime import status
from agent.runtime.tick import run_tick
from agent.sim import ManualClock, Simulator
from tests.conftest import events_of, good_offer, plant_ours
from tests.fakes.openai_server import reply


def _true_burn(sim: Simulator, ids: list[int]) -> tuple[float, float]:
    """The simulator's own $/h for these running instances: (dph_total, traffic at their hosts' $/GB)."""
    run = [sim.instances[i] for i in ids if sim.instances[i]["actual_status"] == "running"]
    dph = sum(i["dph_total"] for i in run)
    traffic = sum(i["_up_gbph"] * i["inet_up_cost"] + i["_down_gbph"] * i["inet_down_cost"] for i in run)
    return dph, traffic


def _tick(app: Any, sim: Simulator, clock: ManualClock, fake_model: Any) -> None:
    fake_model.enqueue(reply("nothing to do"))
    assert run_tick(app).ok
    clock.advance(300)
    sim.tick()


def test_the_runway_and_the_low_credit_alert_count_the_traffic_the_fleet_bills(
        make_app, sim: Simulator, sim_clock: ManualClock, fake_model) -> None:
    """Two instances of a data-heavy workload on hosts billing $0.02 per GB: bandwidth is a large part of what
    the credit pays. After a few ticks have measured it, the runway in the observation and in the low-credit
    alert is the credit over $/h *and* traffic, within 5 % of the simulator's own rates, and the observation's
    balance line says how much of the burn is traffic. Counting $/h alone overstated the runway."""
    sim.traffic_scale = 10.0
    app = make_app(policy={"max_instances": 2})
    ids = []
    for k in range(2):
        offer = good_offer(sim, app.settings)
        offer["inet_up_cost"] = offer["inet_down_cost"] = 0.02
        ids.append(plant_ours(app, sim, offer["id"], key=f"feedc0ffee{k:02d}"))
    sim.advance(600)
    for _ in range(4):
        _tick(app, sim, sim_clock, fake_model)
    dph, traffic = _true_burn(sim, ids)
    assert traffic >= 0.2 * (dph + traffic), (dph, traffic)  # bandwidth is a fair part of the burn

    sim.set_credit(20.0)  # under alerts.low_balance ($25), above the reserve
    _tick(app, sim, sim_clock, fake_model)
    [start] = list(app.log.read(0, kinds=["tick.started"], newest_first=True, limit=1))
    obs = start.payload["observation"]
    truth = obs["balance"] / (dph + traffic)
    assert abs(obs["runway_h"] - truth) <= 0.05 * truth, (obs["runway_h"], truth, obs.get("traffic_dph"))
    assert abs(obs["traffic_dph"] - traffic) <= 0.05 * traffic, (obs["traffic_dph"], traffic)
    [a] = [a for a in app.log.store.open_alerts() if a.dedup_key.startswith("balance:low")]
    m = re.search(r"at \$([\d.]+)/h", a.title)
    assert m is not None and abs(float(m.group(1)) - (dph + traffic)) <= 0.05 * (dph + traffic), a.title
    message = render(start)
    text = message["content"] if message is not None else ""
    assert re.search(r"\$[\d.]+/h \+ \$[\d.]+/h traffic", str(text)), text
    assert events_of(app, "instance.traffic")
    f = status.fleet(app.log)
    assert f is not None and f["traffic_dph"] == obs["traffic_dph"]
    shown = format_text({"daemon": {"running": False}, "fleet": f, "last_tick": None, "alerts": []})
    assert f"+ ${obs['traffic_dph']:,.2f}/h traffic · credit" in shown, shown
