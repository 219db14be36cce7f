"""Each GPU model's jobs/h (agent.fleet.throughput): learned from the jobs the fleet's own instances complete
(the demand source's ``workers``, recorded per instance in each tick's observation), the configured prior until
then, per GPU model; and the simulator, the demand client and the observation that carry the figures."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import httpx
import pytest

from agent.clients.demand import Demand, DemandClient, DemandError
from agent.fleet import throughput
from agent.runtime.tick import run_tick
from agent.sim.market import MODEL_BY_NAME
from tests.conftest import events_of, plant_ours


def _obs(t: float, pending: int, insts: list[tuple[int, str, int, str, int | None]]) -> dict[str, Any]:
    return {"time": t, "demand": {"pending": pending},
            "instances": [{"id": i, "gpu_name": g, "num_gpus": n, "status": st, "jobs": j, "ours": True}
                          for i, g, n, st, j in insts]}


def test_jobs_per_hour_are_learned_per_gpu_model_from_completions():
    """Two 4090s doing 8 jobs/h, a 2-GPU 3090 doing 8 jobs/h (4 per GPU), over three busy hours (each with a
    job done already at the first look)."""
    obs = [_obs(3600.0 * h, 500, [(1, "RTX 4090", 1, "running", 8 * h + 1), (2, "RTX 4090", 1, "running", 8 * h + 1),
                                   (3, "RTX 3090", 2, "running", 8 * h + 1)]) for h in range(4)]
    measured = throughput.measure(obs)
    assert measured == {"RTX 4090": (48.0, 6.0), "RTX 3090": (24.0, 6.0)}
    tp = throughput.Throughput(8.0, {}, measured)
    assert tp.per_gpu("RTX 4090") == pytest.approx(8.0)
    assert tp.per_gpu("RTX 3090") == pytest.approx((8.0 * throughput.PRIOR_GPU_HOURS + 24) / (throughput.PRIOR_GPU_HOURS + 6))
    assert tp.rate("RTX 3090").learned and tp.per_instance("RTX 3090", 2) == pytest.approx(2 * tp.per_gpu("RTX 3090"))
    assert tp.usd_per_job(0.40, "RTX 4090", 1) == pytest.approx(0.05)


def test_the_prior_stands_until_a_model_is_measured_then_gives_way():
    tp = throughput.Throughput(8.0, {"H100 SXM": 30.0}, {})
    assert tp.per_gpu("RTX 4090") == 8.0 and tp.per_gpu("H100 SXM") == 30.0
    assert not tp.rate("H100 SXM").learned
    short = throughput.Throughput(8.0, {}, {"RTX 3090": (0.4, 0.1)})   # one 5-minute interval: 4 jobs/h
    long = throughput.Throughput(8.0, {}, {"RTX 3090": (16.0, 4.0)})   # four GPU-hours of it
    assert 4.0 < long.per_gpu("RTX 3090") < short.per_gpu("RTX 3090") < 8.0
    assert long.per_gpu("RTX 3090") == pytest.approx(4.0, rel=0.06)


def test_intervals_that_say_nothing_about_throughput_are_left_out():
    """The queue ran dry (idle GPUs), an instance not running at the start (starting up), a counter that went
    back (a new queue), a gap of hours (the daemon was down), and an instance not ours."""
    a = _obs(0.0, 50, [(1, "RTX 4090", 1, "running", 10), (2, "RTX 4090", 1, "loading", None),
                       (3, "RTX 4090", 1, "running", 40)])
    b = _obs(3600.0, 50, [(1, "RTX 4090", 1, "running", 18), (2, "RTX 4090", 1, "running", 3),
                          (3, "RTX 4090", 1, "running", 2)])
    assert throughput.measure([a, b]) == {"RTX 4090": (8.0, 1.0)}
    dry = _obs(3600.0, 0, [(1, "RTX 4090", 1, "running", 12)])
    assert throughput.measure([a, dry]) == {}
    late = _obs(4 * 3600.0, 50, [(1, "RTX 4090", 1, "running", 40)])
    assert throughput.measure([a, late]) == {}
    theirs = {**b, "instances": [{**x, "ours": False} for x in b["instances"]]}
    assert throughput.measure([{**a, "instances": [{**x, "ours": False} for x in a["instances"]]}, theirs]) == {}


def test_a_dry_queue_is_a_floor_under_a_model_the_prior_undersells():
    """An H100 doing 20 jobs/h for an hour with the queue dry at every look: that says it can do at least 20
    (the prior's 8 is wrong), never how much more; a 4090 doing 3 with the prior at 8 keeps the prior."""
    obs = [_obs(600.0 * k, 0, [(1, "H100 SXM", 1, "running", 1 + round(20 * k / 6)),
                               (2, "RTX 4090", 1, "running", 1 + round(3 * k / 6))]) for k in range(7)]
    assert throughput.measure(obs) == {}
    floor = throughput.measure(obs, busy=False)
    assert floor == {"H100 SXM": (20.0, pytest.approx(1.0)), "RTX 4090": (3.0, pytest.approx(1.0))}
    tp = throughput.Throughput(8.0, {}, {}, floor)
    assert tp.per_gpu("H100 SXM") == pytest.approx(20.0) and tp.per_gpu("RTX 4090") == 8.0
    assert not tp.rate("H100 SXM").learned  # a floor is not a measurement
    thin = throughput.Throughput(8.0, {}, {}, {"H100 SXM": (2.0, 0.1)})  # one look: too little to go on
    assert thin.per_gpu("H100 SXM") == 8.0
    busy = throughput.Throughput(8.0, {}, {"H100 SXM": (120.0, 4.0)}, floor)  # measured busy: 30 stands
    assert busy.per_gpu("H100 SXM") == pytest.approx((8.0 * throughput.PRIOR_GPU_HOURS + 120) /
                                                     (throughput.PRIOR_GPU_HOURS + 4))
    settings_tp = throughput.from_observations(_settings(), obs)
    assert settings_tp.per_gpu("H100 SXM") == pytest.approx(20.0)


def _settings() -> Any:
    from agent.config import Settings

    return Settings()


def test_the_demand_client_reads_workers_and_tolerates_their_absence():
    d = Demand.from_json({"pending": 3, "completed": 9, "workers": {"101": {"completed": 7}, "102": {"completed": 2.0}}})
    assert d.workers == {101: 7, 102: 2}
    assert Demand.from_json({"pending": 3, "completed": 9}).workers == {}
    assert Demand.from_json({"pending": 3, "completed": 9, "workers": None}).workers == {}
    for bad, where in (([1, 2], "'workers' must map"), ({"x": {"completed": 1}}, "workers['x']"),
                       ({"5": {"done": 1}}, "workers['5']"), ({"5": 3}, "workers['5']")):
        with pytest.raises(DemandError, match=where.replace("[", r"\[")):
            Demand.from_json({"pending": 3, "completed": 9, "workers": bad})


def test_the_simulator_serves_each_instances_completions(sim, sim_server, sim_clock):
    """GET /demand over HTTP: workers holds every live instance's cumulative completed jobs, which add up to
    what the queue completed while they ran."""
    a = sim.find_offer("RTX 4090")
    iid = sim.create_instance(a["id"], label="x")
    sim.pending = 500.0
    sim_clock.advance(3 * 3600)
    with DemandClient(f"{sim_server.url}/demand", transport=httpx.HTTPTransport()) as client:
        d = client.get()
    assert set(d.workers) == {iid}
    assert 0 < d.workers[iid] <= 3 * MODEL_BY_NAME["RTX 4090"].jobs_per_h_per_gpu
    assert d.workers[iid] == int(sim.instances[iid]["_jobs"])


def test_ticks_learn_each_models_rate_from_the_simulator(make_app, sim, sim_clock):
    """Rented instances of two models under a backlog: after two hours of ticks the observation's jobs/h per
    GPU model is near what the simulator's GPUs really do, and marked measured; $/job follows, with the traffic
    their hosts bill per GB on top of $/h."""
    sim.pending = 2000.0
    app = make_app(provider="openai", schedule={"max_steps": 1})
    fast = plant_ours(app, sim, sim.find_offer("RTX 4090")["id"], key="aaaaaaaaaaa1")
    slow = plant_ours(app, sim, sim.find_offer("RTX 3090")["id"], key="aaaaaaaaaaa2")
    for _ in range(25):
        sim_clock.advance(300)
        sim.tick()
        run_tick(app)
    obs = events_of(app, "tick.started")[-1].payload["observation"]
    models = obs["gpu_models"]
    for gpu in ("RTX 4090", "RTX 3090"):
        assert models[gpu]["measured_gpu_h"] >= 1.5, models
        assert models[gpu]["jobs_per_h"] == pytest.approx(MODEL_BY_NAME[gpu].jobs_per_h_per_gpu, rel=0.15), models
        dph = next(i["dph"] for i in obs["instances"] if i["gpu_name"] == gpu)
        inst = sim.instances[fast if gpu == "RTX 4090" else slow]
        traffic = inst["_up_gbph"] * inst["inet_up_cost"] + inst["_down_gbph"] * inst["inet_down_cost"]
        assert models[gpu]["usd_per_job"] == pytest.approx((dph + traffic) / models[gpu]["jobs_per_h"], rel=0.01)
    recs = {i["id"]: i for i in obs["instances"]}
    assert recs[fast]["jobs"] > recs[slow]["jobs"] > 0
    assert recs[fast]["gpu_util"] is not None and recs[fast]["up_s"] > 3600
    est = throughput.estimate(app.log, app.settings)
    assert est.per_gpu("RTX 4090") == pytest.approx(models["RTX 4090"]["jobs_per_h"], rel=0.05)
    # an unmeasured model keeps the configured prior
    s = dataclasses.replace(app.settings, policy=dataclasses.replace(app.settings.policy,
                                                                      jobs_per_hour_by_gpu={"L40S": 11.0}))
    assert throughput.estimate(app.log, s).per_gpu("L40S") == 11.0
    text = events_of(app, "tick.started")[-1]
    from agent import events as ev

    content = ev.render(text)["content"]  # type: ignore[index]
    assert "per GPU model: RTX 3090 ×1" in content and "measured" in content
    assert re.search(rf"#{fast} RTX 4090 .* · util \d+% · up \dh\d\dm · {recs[fast]['jobs']} jobs", content), content


def test_search_offers_shows_jobs_per_hour_and_dollars_per_job_after_its_columns(make_app, sim):
    """The columns the table had keep their places; jobs/h and $/job follow, from the configured prior per
    GPU model (none measured yet), and order=per_job lists the cheapest per job first."""
    import json

    from agent.fleet.pipeline import run_tool_call
    from agent.fleet.policy import Policy
    from agent.fleet.toolkit import ToolContext, load_tools

    app = make_app(provider="rules", policy={"jobs_per_hour_by_gpu": {"RTX 4090": 8.0, "RTX 3090": 4.0},
                                             "min_reliability": 0.9, "jobs_per_hour_dlperf": 0.0},
                   fleet={"disk_gb": 10.0})
    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None, policy=Policy(app.settings),
                      tick=1)
    ctx.refresh()
    tools = load_tools()

    def table(args: dict[str, Any]) -> list[list[str]]:
        outcome, _ = run_tool_call(tools, ctx, {"id": "c", "name": "search_offers",  # type: ignore[arg-type]
                                                "arguments": json.dumps(args)}, dry_run=False)
        lines = outcome.output.splitlines()
        assert lines[0] == ("offer_id | gpu | $/h | reliability | host | location | jobs/h | $/job | dlperf | "
                            "contract"), lines[0]
        assert "assumed (policy.jobs_per_hour)" in lines[-1], lines[-1]
        return [[p.strip() for p in x.split("|")] for x in lines[1:] if x[:1].isdigit()]

    by_dph = table({"limit": 25})
    assert [float(r[2]) for r in by_dph] == sorted(float(r[2]) for r in by_dph)
    for r in by_dph:
        jph = {"RTX 4090": 8.0, "RTX 3090": 4.0}.get(r[1].rsplit(" x", 1)[0], 8.0)
        assert float(r[6]) == jph and float(r[7]) == pytest.approx(float(r[2]) / jph, abs=2e-4), r  # $/h is shown to 3 places
        assert float(r[8]) == pytest.approx(sim.offers[int(r[0])]["dlperf"], abs=0.05), r  # vast.ai's score
    per_job = table({"limit": 25, "order": "per_job"})
    assert [float(r[7]) for r in per_job] == sorted(float(r[7]) for r in per_job)
    assert sorted(r[0] for r in per_job) == sorted(r[0] for r in by_dph)
    assert [r[0] for r in per_job] != [r[0] for r in by_dph]


def test_a_model_not_yet_measured_is_priced_by_its_dlperf_from_the_measured_ones():
    """Jobs/h per dlperf point from the models measured a quarter of a GPU-hour or more (each one's estimate,
    blended with the flat prior, weighed by its GPU-hours), times an unmeasured model's dlperf per GPU; a
    configured prior still wins, a model with no dlperf keeps the flat one, and models measured too little
    calibrate nothing."""
    dl = {"RTX 4090": 62.0, "RTX 3090": 31.0, "H100 SXM": 205.0}
    tp = throughput.Throughput(8.0, {"L40S": 11.0}, {"RTX 4090": (16.0, 2.0), "RTX 3090": (8.0, 2.0)}, {}, dl)
    w = throughput.PRIOR_GPU_HOURS
    jobs = 2.0 * (8.0 * w + 16.0) / (w + 2.0) + 2.0 * (8.0 * w + 8.0) / (w + 2.0)  # 16 and ~8.9
    assert tp.per_dlperf() == pytest.approx(jobs / (2.0 * 62 + 2.0 * 31))
    assert tp.per_gpu("H100 SXM") == pytest.approx(205 * jobs / 186.0)  # ~27, not 8
    assert tp.basis("H100 SXM") == "dlperf" and tp.basis("RTX 4090") == "measured"
    assert tp.per_gpu("L40S") == 11.0 and tp.basis("L40S") == "configured"
    assert tp.per_gpu("A100 SXM4") == 8.0 and tp.basis("A100 SXM4") == "assumed"  # no dlperf known
    assert tp.with_dlperf({"A100 SXM4": 108.0}).per_gpu("A100 SXM4") == pytest.approx(108 * jobs / 186.0)
    thin = throughput.Throughput(8.0, {}, {"RTX 4090": (2.0, 0.2), "RTX 3090": (1.0, 0.2)}, {}, dl)
    assert thin.per_dlperf() is None and thin.per_gpu("H100 SXM") == 8.0  # 0.2 GPU-h each: too little
    # one model measured for half a GPU-hour already ranks the rest: an RTX 3090 seen doing 4 jobs/h (blended
    # with the prior: ~5.3) prices an RTX A6000 (dlperf 44) under an RTX 4090 (62), not both at the flat 8
    early = throughput.Throughput(8.0, {}, {"RTX 3090": (2.0, 0.5)}, {}, {**dl, "RTX A6000": 44.0})
    assert early.per_gpu("RTX A6000") == pytest.approx(44.0 * (8.0 * w + 2.0) / (w + 0.5) / 31.0)
    assert early.per_gpu("RTX A6000") < early.per_gpu("RTX 4090") < 8.0 * 1.5
    # a model's own prior is not drawn from its own measurement: a quarter GPU-hour with no job done blends with
    # the flat 8 once (4 jobs/h), not with a dlperf prior that already says 4 (2 jobs/h)
    alone = throughput.Throughput(8.0, {}, {"RTX 3090": (0.0, 0.25)}, {}, dl)
    assert alone.per_gpu("RTX 3090") == pytest.approx(4.0) and alone.basis("RTX 3090") == "assumed"
    assert alone.per_gpu("RTX 4090") == pytest.approx(8.0)  # 62 points at 4/31 a point
    assert throughput.dlperf_of([("RTX 4090", 2, 124.0), ("RTX 4090", 1, 60.0), ("RTX 4090", 1, 70.0),
                                 ("H100 SXM", 1, None), (None, 1, 10.0)]) == {"RTX 4090": 62.0}


def test_search_offers_prices_an_unmeasured_model_by_dlperf_once_one_is_measured(make_app, sim, sim_clock):
    """A busy RTX 4090 of ours for an hour: the observation records its dlperf, and search_offers then shows an
    H100 (never rented) at its dlperf's worth of jobs/h, near what it really does, not the flat 8, and says so."""
    import json

    from agent.fleet.pipeline import run_tool_call
    from agent.fleet.policy import Policy
    from agent.fleet.toolkit import ToolContext, load_tools

    sim.pending = 2000.0
    app = make_app(provider="openai", schedule={"max_steps": 1}, fleet={"disk_gb": 10.0},
                   policy={"min_reliability": 0.9})
    plant_ours(app, sim, sim.find_offer("RTX 4090")["id"], key="aaaaaaaaaaa1")
    for _ in range(12):
        sim_clock.advance(300)
        sim.tick()
        run_tick(app)
    models = events_of(app, "tick.started")[-1].payload["observation"]["gpu_models"]
    assert models["RTX 4090"]["dlperf"] == pytest.approx(MODEL_BY_NAME["RTX 4090"].dlperf_per_gpu, rel=0.1), models
    assert app.throughput().per_dlperf() is not None
    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None, policy=Policy(app.settings),
                      tick=99)
    ctx.refresh()
    outcome, _ = run_tool_call(load_tools(), ctx, {"id": "c", "name": "search_offers",  # type: ignore[arg-type]
                                                   "arguments": json.dumps({"gpu_name": "H100 SXM"})}, dry_run=False)
    rows = [[p.strip() for p in x.split("|")] for x in outcome.output.splitlines()[1:] if x[:1].isdigit()]
    assert rows, outcome.output
    real = MODEL_BY_NAME["H100 SXM"].jobs_per_h_per_gpu
    for r in rows:
        assert float(r[6]) == pytest.approx(real, rel=0.25), r  # 30 jobs/h really; the flat prior said 8
    assert "scaled by dlperf from the measured models" in outcome.output and "for H100 SXM" in outcome.output


def test_search_offers_compares_single_and_multi_gpu_offers_with_max_gpus(make_app, sim):
    """max_gpus lists offers of 1 up to that many GPUs, each with what the whole instance delivers; asking for
    both num_gpus and max_gpus is one clear error."""
    import json

    from agent.fleet.pipeline import run_tool_call
    from agent.fleet.policy import Policy
    from agent.fleet.toolkit import ToolContext, load_tools

    app = make_app(provider="rules", policy={"min_reliability": 0.9, "jobs_per_hour_dlperf": 0.0},
                   fleet={"disk_gb": 10.0})
    ctx = ToolContext(settings=app.settings, log=app.log, vast=app.vast(), demand=None, policy=Policy(app.settings),
                      tick=1)
    ctx.refresh()

    def call(args: dict[str, Any]) -> Any:
        outcome, _ = run_tool_call(load_tools(), ctx, {"id": "c", "name": "search_offers",  # type: ignore[arg-type]
                                                       "arguments": json.dumps(args)}, dry_run=False)
        return outcome

    out = call({"limit": 25, "max_gpus": 8, "order": "per_job"})
    rows = [[p.strip() for p in x.split("|")] for x in out.output.splitlines()[1:] if x[:1].isdigit()]
    counts = {int(r[1].rsplit(" x", 1)[1]) for r in rows}
    assert 1 in counts and max(counts) > 1, rows
    for r in rows:
        n = int(r[1].rsplit(" x", 1)[1])
        assert float(r[6]) == pytest.approx(8.0 * n) and n == sim.offers[int(r[0])]["num_gpus"], r
    single = call({"limit": 25})
    assert all(r.split("|")[1].strip().endswith(" x1") for r in single.output.splitlines()[1:] if r[:1].isdigit())
    both = call({"num_gpus": 2, "max_gpus": 4})
    assert not both.ok and "not both" in (both.error or ""), both


def test_the_observation_says_an_unmeasured_model_is_priced_by_its_dlperf(make_app, sim, sim_clock):
    """A busy RTX 4090 of ours for an hour calibrates jobs/h per dlperf point; an H100 then rented (never measured)
    gets its dlperf's worth of jobs/h in the observation, which records ``basis`` per GPU model and reads
    ``scaled from dlperf``, not ``assumed``. A row written before ``basis`` existed reads as it always did."""
    from agent import events as ev

    sim.pending = 2000.0
    app = make_app(provider="openai", schedule={"max_steps": 1}, fleet={"disk_gb": 10.0})
    plant_ours(app, sim, sim.find_offer("RTX 4090")["id"], key="aaaaaaaaaaa1")
    for _ in range(15):  # over an hour measured
        sim_clock.advance(300)
        sim.tick()
        run_tick(app)
    plant_ours(app, sim, sim.find_offer("H100 SXM")["id"], key="aaaaaaaaaaa2")
    sim_clock.advance(300)
    sim.tick()
    run_tick(app)
    e = events_of(app, "tick.started")[-1]
    models = e.payload["observation"]["gpu_models"]
    assert models["RTX 4090"]["basis"] == "measured" and models["H100 SXM"]["basis"] == "dlperf", models
    real = MODEL_BY_NAME["H100 SXM"].jobs_per_h_per_gpu
    assert models["H100 SXM"]["jobs_per_h"] == pytest.approx(real, rel=0.25), models  # the flat prior says 8
    text = ev.render(e)["content"]  # type: ignore[index]
    line = next(x for x in text.splitlines() if x.startswith("per GPU model: "))
    h100 = next(p for p in line.split("; ") if "H100 SXM" in p)
    assert f"(scaled from dlperf {models['H100 SXM']['dlperf']:.1f}, not yet measured)" in h100, line
    assert "assumed" not in line and "RTX 4090 ×1" in line and "(measured " in line, line
    old = {**e.payload["observation"], "gpu_models": {g: {k: v for k, v in m.items() if k != "basis"}
                                                      for g, m in models.items()}}
    before = ev.render(dataclasses.replace(e, payload={"observation": old}, version=7))["content"]  # type: ignore[index]
    assert "(assumed, not yet measured)" in next(p for p in before.split("; ") if "H100 SXM" in p)


def test_before_any_measurement_the_prior_is_for_a_gpu_of_the_reference_dlperf():
    """``policy.jobs_per_hour`` is the figure for a GPU of ``policy.jobs_per_hour_dlperf`` (per GPU): with no model
    measured, an RTX 3090 (dlperf 31) is not counted as an RTX 4090 (62), nor an H100 (205) as either; a
    configured prior still wins, a model with no dlperf keeps the flat figure, and 0 turns the scaling off. Once
    the busy intervals have left the window (nothing measured any more) the figures fall back to the same
    scaled prior, not the flat one."""
    dl = {"RTX 4090": 62.0, "RTX 3090": 31.0, "H100 SXM": 205.0}
    tp = throughput.Throughput(8.0, {"L40S": 11.0}, {}, {}, dl, reference_dlperf=62.0)
    assert tp.per_gpu("RTX 3090") == pytest.approx(4.0) and tp.per_gpu("RTX 4090") == pytest.approx(8.0)
    assert tp.per_gpu("H100 SXM") == pytest.approx(8.0 * 205 / 62)
    assert tp.basis("RTX 3090") == "dlperf" and tp.per_dlperf() == pytest.approx(8.0 / 62)
    assert tp.per_gpu("L40S") == 11.0 and tp.basis("L40S") == "configured"
    assert tp.per_gpu("A100 SXM4") == 8.0 and tp.basis("A100 SXM4") == "assumed"  # no dlperf known
    assert throughput.Throughput(8.0, {}, {}, {}, dl, reference_dlperf=0.0).per_gpu("RTX 3090") == 8.0
    # a measured model blends with its own scaled prior: a quarter GPU-hour of an RTX 3090 doing 4 jobs/h stays 4
    w = throughput.PRIOR_GPU_HOURS
    one = throughput.Throughput(8.0, {}, {"RTX 3090": (4.0 * w, w)}, {}, dl, reference_dlperf=62.0)
    assert one.per_gpu("RTX 3090") == pytest.approx(4.0) and one.per_gpu("RTX 4090") == pytest.approx(8.0)
    # from the settings: the default reference is about an RTX 4090's dlperf
    s = _settings(jobs_per_hour=8.0)
    assert throughput.prior_only(s).with_dlperf(dl).per_gpu("RTX 3090") == pytest.approx(8.0 * 31 / 60)
    dry = [_obs(3600.0 + 300 * k, 0, [(1, "RTX 3090", 1, "running", k)]) for k in range(3)]
    for o in dry:
        o["gpu_models"] = {"RTX 3090": {"dlperf": 31.0}}
    assert throughput.from_observations(s, dry).per_gpu("RTX 3090") == pytest.approx(8.0 * 31 / 60)


def _settings(**policy: Any) -> Any:
    from agent.config import Settings

    base = Settings()
    return dataclasses.replace(base, policy=dataclasses.replace(base.policy, **policy))
