"""Fork: any past moment re-run with a change into a new log, the origin untouched; fork diff compares
what the model decided. The origin is a real log written by real ticks against the simulator and the
scripted model through the real SDK; the fork runs its own simulator seeded from that log."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent import context
from agent.cli import main
from agent.fork import Change, Where, diff_fork, make_fork
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.store.log import EventLog
from tests.conftest import events_of, offer_rows
from tests.fakes.openai_server import FakeOpenAI, reply


def _digest(data_dir: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(data_dir.iterdir())
            if p.name.endswith((".db", ".head", ".verified"))}


def _rent(offer_id: int) -> tuple[str, dict[str, Any]]:
    return ("rent_instance", {"offer_id": offer_id, "reason": "scripted"})


def _tick3(offers: list[dict[str, Any]]) -> list[Any]:
    return [reply("more capacity", tool_calls=[_rent(offers[1]["id"]), _rent(offers[2]["id"])]), reply("done")]


@pytest.fixture
def origin(sim, sim_clock, make_app, fake_model) -> tuple[App, list[dict[str, Any]]]:
    """Three ticks: tick 1 searches offers, tick 2 rents the cheapest, tick 3 rents the next two
    (max_instances 8 allows it)."""
    sim.realism.update({"unschedulable": 0, "stuck_scheduling": 0})  # every rent it scripts is taken
    app = make_app(policy={"max_instances": 8, "max_rents_per_hour": 100})
    fake_model.enqueue(reply("look", tool_calls=[("search_offers", {})]), reply("done"))
    assert run_tick(app).ok
    offers = offer_rows(events_of(app, "tool.result", 1)[0].payload["output"])[:3]
    assert len(offers) == 3
    for steps in ([reply("rent one", tool_calls=[_rent(offers[0]["id"])]), reply("done")], _tick3(offers)):
        sim_clock.advance(300)
        fake_model.enqueue(*steps)
        assert run_tick(app).ok
    assert sum(e.payload["ok"] for e in events_of(app, "tool.result", 3)) == 2
    app.close()
    return app, offers


def test_fork_at_a_tick_with_a_lower_cap_refuses_the_rent_and_leaves_the_origin_byte_identical(
        origin, sim, tmp_path, fake_model):
    """Forking at tick 3 with policy.max_instances=2 re-runs tick 3 from the context as it was: the same
    answers from the model now rent one offer and have the second refused by max_instances (the original
    rented both). The fork's log starts with the origin's events row for row, then fork.started names the
    origin (fleet, seq, hash, head); the origin database, head and checkpoint files are byte-identical, and
    the origin's vast.ai (here its simulator) receives not one request."""
    app, offers = origin
    before = _digest(app.settings.data_path)
    calls_before = len(sim.requests)
    fake_model.enqueue(*_tick3(offers))
    r = make_fork(app.settings, Where(tick=3), Change(sets=("policy.max_instances=2",),
                                                      model=(fake_model.base_url, "scripted")),
                  ticks=1, out=tmp_path / "what-if")
    assert _digest(app.settings.data_path) == before
    assert len(sim.requests) == calls_before
    assert [t.ok for t in r.ticks] == [True]

    # The model saw the changed policy, in a request whose prefix is the origin's context at the fork point.
    system = fake_model.chat_requests[-2].json["messages"][0]["content"]
    assert "max_instances: 2" in system and "max_instances: 8" not in system

    origin_log = EventLog(app.settings.db_path, readonly=True)
    fork_log = EventLog(tmp_path / "what-if" / "data" / "fleet-agent.db", readonly=True)
    try:
        seq = r.point.seq
        assert [e.hash for e in fork_log.read(0, until_seq=seq)] == [e.hash for e in origin_log.read(0, until_seq=seq)]
        started = fork_log.get(seq + 1)
        assert started is not None and started.kind == "fork.started"
        p = started.payload
        assert (p["origin_fleet"], p["origin_seq"], p["origin_hash"]) == (app.settings.agent_id, seq,
                                                                          origin_log.get(seq).hash)
        assert (p["origin_head_seq"], p["origin_head_hash"]) == origin_log.head()
        assert p["changes"] == ["policy.max_instances=2", f"model scripted at {fake_model.base_url}"]
        prompts, pol = app.prompts, app.policy_dict()
        tools = app.tool_specs()
        a = context.project(origin_log, prompts, app.settings.context, policy=pol, tools=tools, until_seq=seq)
        b = context.project(fork_log, prompts, app.settings.context, policy=pol, tools=tools, until_seq=seq)
        assert a.request_hash == b.request_hash
        assert [e.payload["rule"] for e in fork_log.read(seq, kinds=["policy.blocked"])] == ["max_instances"]
        assert fork_log.verify().ok
    finally:
        origin_log.close()
        fork_log.close()

    _, diffs, warnings = diff_fork(tmp_path / "what-if")
    assert warnings == []
    (d,) = diffs
    assert d.tick == 3 and not d.same
    assert [x.outcome for x in d.original.steps[0]] == ["ok", "ok"]
    assert [x.outcome for x in d.fork.steps[0]] == ["ok", "blocked:max_instances"]
    assert [x.arguments for x in d.original.steps[0]] == [x.arguments for x in d.fork.steps[0]]


def _config_file(app: App, path: Path) -> Path:
    """The origin's settings as a config file, as an operator's /etc/fleet-agent/config.yaml would hold them."""
    d = json.loads(json.dumps(app.settings.to_dict(), default=str))
    d["data_dir"] = str(app.settings.data_path)
    d["knowledge_dir"] = str(app.settings.knowledge_path)
    path.write_text(yaml.safe_dump(d), encoding="utf-8")
    return path


def test_fork_and_fork_diff_commands_print_the_decisions_side_by_side(origin, tmp_path, fake_model, capsys):
    """`fleet-agent fork --tick 3 --set policy.max_instances=2 --model URL NAME --out DIR` runs the fork and
    says where it is; `fleet-agent fork diff DIR` shows tick 3 step by step: the first rent the same in
    both, the second ok in the original and BLOCKED max_instances in the fork."""
    app, offers = origin
    cfg = _config_file(app, tmp_path / "origin.yaml")
    fake_model.enqueue(*_tick3(offers))
    out = tmp_path / "f"
    rc = main(["--config", str(cfg), "fork", "--tick", "3", "--set", "policy.max_instances=2", "--model",
               fake_model.base_url, "scripted", "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "forked fleet-1 at tick 3" in text and f"fork diff {out}" in text
    assert main(["fork", "diff", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "tick 3: DIFFERENT"
    second = offers[2]["id"]
    original = next(x for x in lines if "original" in x and f'"offer_id": {second}' in x)
    forked = next(x for x in lines if "fork  " in x and f'"offer_id": {second}' in x)
    assert original.rstrip().endswith("ok: rented " + original.rsplit(" ", 1)[-1]) and "BLOCKED" not in original
    assert "BLOCKED max_instances" in forked
    assert any(x.strip().startswith("step 1") and "same" in x and f'"offer_id": {offers[1]["id"]}' in x
               for x in lines)
    assert lines[-1] == "1 of 1 ticks decided differently"
    assert main(["fork", "diff", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["origin"]["origin_seq"] > 0 and [t["same"] for t in doc["ticks"]] == [False]


@pytest.mark.parametrize(("argv", "message"), [
    (["--tick", "9", "--rules"], "--tick 9: no such tick in the origin log (the log's ticks end at 3)"),
    (["--tick", "3", "--set", "policy.max_instnces=2"], "no setting policy.max_instnces; settings there:"),
    (["--tick", "3", "--set", "policy.max_instances=-1"], "policy.max_instances: must not be negative"),
    (["--tick", "3", "--set", "max_instances"], "is not KEY=VALUE"),
    (["--tick", "3", "--set", "vast.url=https://console.vast.ai"], "a fork keeps its own vast.url"),
    (["--tick", "3", "--set", "data_dir=/tmp"], "a fork keeps its own data_dir"),
    (["--tick", "3"], "fork needs a change to try"),
    (["--tick", "3", "--at", "2026-01-01T00:00Z", "--rules"], "exactly one of --tick N or --at TIME"),
    (["--at", "tomorrow", "--rules"], "'tomorrow' is not a time"),
], ids=["no-such-tick", "unknown-key", "bad-value", "no-equals", "real-vast", "real-data", "no-change", "both",
        "bad-time"])
def test_a_bad_fork_request_is_one_line_exit_2_and_leaves_nothing(origin, tmp_path, capsys, argv, message):
    """Each bad request is refused with one line naming what is wrong and how to fix it (exit 2); the
    --out directory stays empty and the origin's files are untouched."""
    app, _ = origin
    cfg = _config_file(app, tmp_path / "origin.yaml")
    before = _digest(app.settings.data_path)
    out = tmp_path / "f"
    rc = main(["--config", str(cfg), "fork", *argv, "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1, err
    assert not out.exists() or not any(out.iterdir())
    assert _digest(app.settings.data_path) == before


def test_at_a_time_between_ticks_forks_where_the_next_tick_starts(origin):
    """--at a time after tick 2 ended and before tick 3 started takes the log as it stood then: the same
    fork point as --tick 3, and the fork's first tick is tick 3."""
    from agent.fork import fork_point, open_origin

    app, _ = origin
    log = open_origin(app.settings)
    try:
        t2 = next(log.read(0, kinds=["tick.completed"], tick=2))
        at = t2.ts[:17] + "59Z"  # within the minute after tick 2 ended; tick 3 ran 5 minutes later
        by_time, by_tick = fork_point(log, Where(at=at)), fork_point(log, Where(tick=3))
    finally:
        log.close()
    assert (by_time.seq, by_time.first_tick) == (by_tick.seq, 3) == (t2.seq, 3)


def test_at_a_time_inside_a_tick_forks_before_that_tick(sim_clock, make_app, fake_model):
    """--at a time while a tick was running (its model was thinking) moves back to that tick's start, so a
    fork never begins between a tick's observation and its decisions."""
    from agent.fork import fork_point, open_origin

    app = make_app()

    def slow(_request: dict[str, Any]) -> Any:
        sim_clock.advance(120)  # the model takes two minutes to answer
        return reply("done")

    fake_model.enqueue(reply("nothing"))
    assert run_tick(app).ok
    sim_clock.advance(300)
    fake_model.enqueue(slow)
    assert run_tick(app).ok
    req = events_of(app, "model.request", 2)[0]
    done = events_of(app, "tick.completed", 2)[0]
    assert done.ts > req.ts
    log = open_origin(app.settings)
    try:
        p = fork_point(log, Where(at=req.ts))
        first = next(log.read(0, tick=2, limit=1))
    finally:
        log.close()
    assert (p.seq, p.first_tick) == (first.seq - 1, 2)


def test_prompt_dir_change_reaches_the_fork_and_not_the_origin(origin, tmp_path, fake_model):
    """--prompt-dir DIR: the fork's requests carry DIR's system prompt (the origin's carried the one in force
    then); the fork's input.recorded logs the new prompt by hash, so replay --verify holds on the fork."""
    app, offers = origin
    pdir = tmp_path / "prompts"
    pdir.mkdir()
    (pdir / "system.md").write_text("# Charter\n\nTRY THIS: never rent more than one instance per tick.\n",
                                    encoding="utf-8")
    (pdir / "summarize.md").write_text(app.prompts.summarize, encoding="utf-8")
    fake_model.enqueue(*_tick3(offers))
    r = make_fork(app.settings, Where(tick=3), Change(prompt_dir=pdir, model=(fake_model.base_url, "m")),
                  ticks=1, out=tmp_path / "p")
    assert r.ticks[0].ok
    assert "TRY THIS" in fake_model.chat_requests[-1].json["messages"][0]["content"]
    assert all("TRY THIS" not in req.json["messages"][0]["content"] for req in fake_model.chat_requests[:-2])
    assert main(["--config", str(r.config), "replay", "--verify"]) == 0


def test_the_simulator_is_seeded_with_what_the_origin_logged(origin):
    """The fork's simulator holds the instances the origin observed at the fork point (same ids, labels,
    GPUs, statuses and prices), its balance and queue, and every offer the model was shown, with the ones
    a logged rent took marked rented; new instances get ids above the seeded ones."""
    from agent.fork import fork_point, open_origin
    from agent.fork.seed import seeded_simulator

    app, offers = origin
    log = open_origin(app.settings)
    try:
        p = fork_point(log, Where(tick=3))
        sim, clock, seeded = seeded_simulator(log, p.seq, p.observation, seed=0, time=p.time, api_key="k")
    finally:
        log.close()
    obs = p.observation
    assert clock() == obs["time"] and seeded.instances == len(obs["instances"]) == 1
    listed = {i["id"]: i for i in sim.state()["instances"]}
    for i in obs["instances"]:
        got = listed[i["id"]]
        assert (got["label"], got["gpu_name"], got["num_gpus"], got["host_id"], got["actual_status"] or "provisioning",
                got["dph_total"]) == (i["label"], i["gpu_name"], i["num_gpus"], i["host_id"], i["status"], i["dph"])
    assert sim.balance == obs["balance"] and sim.pending == obs["demand"]["pending"]
    assert [sim.offers[o["id"]]["rented"] for o in offers] == [True, False, False]
    assert all(sim.offers[o["id"]]["dph_total"] == o["dph"] and sim.offers[o["id"]]["host_id"] == o["host"]
               for o in offers)
    new = sim.create_instance(offers[1]["id"], label="x")
    assert new > max(listed)


def test_a_prefix_is_copied_only_whole_and_only_into_an_empty_log(origin, tmp_path):
    """EventLog.adopt copies another log's events row for row (the chain verifies, the read models match a
    rebuild); a row whose content does not match its hash is refused with nothing written, and a log that
    already holds events takes no prefix."""
    import dataclasses

    from agent.errors import ChainBroken, LogError

    app, _ = origin
    src = EventLog(app.settings.db_path, readonly=True)
    try:
        events = list(src.read(0, until_seq=20))
        dst = EventLog(tmp_path / "a.db", create=True)
        try:
            assert dst.adopt(events) == 20 and dst.verify().ok and dst.rebuild_check() == []
            with pytest.raises(LogError, match="already holds events"):
                dst.adopt(events)
        finally:
            dst.close()
        edited = [dataclasses.replace(e, payload={**e.payload, "x": 1}) if e.seq == 12 else e for e in events]
        other = EventLog(tmp_path / "b.db", create=True)
        try:
            with pytest.raises(ChainBroken, match="seq 12: content does not match its hash"):
                other.adopt(edited)
            assert other.last_seq() == 0
        finally:
            other.close()
    finally:
        src.close()


def test_a_model_named_on_the_command_line_never_gets_the_configured_key(origin, tmp_path):
    """--model URL NAME for another server than the configured one is sent $FLEET_AGENT_FORK_MODEL_KEY,
    never the key configured for the fleet's own model server: a server that wants the configured key is
    refused it (the fork's tick fails on auth), and accepts the key given for forks."""
    app, _ = origin
    secret = "sk-configured-canary-1234"
    with FakeOpenAI(api_key=secret) as other:
        r = make_fork(app.settings, Where(tick=3), Change(model=(other.base_url, "other")), ticks=1,
                      out=tmp_path / "k1", env={"OPENAI_API_KEY": secret})
        assert not r.ticks[0].ok and "auth" in (r.ticks[0].reason or "")
        assert other.requests and not any(q.auth_ok for q in other.requests)
        r = make_fork(app.settings, Where(tick=3), Change(model=(other.base_url, "other")), ticks=1,
                      out=tmp_path / "k2", env={"OPENAI_API_KEY": secret, "FLEET_AGENT_FORK_MODEL_KEY": secret})
        assert r.ticks[0].ok and other.requests[-1].auth_ok
