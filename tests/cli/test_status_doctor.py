"""`status` and `doctor` against real SQLite files, the simulator and a fake model on 127.0.0.1."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from agent import cli, config
from agent.feedback import raise_alert
from agent.runtime.app import App
from agent.runtime.lock import FleetLock
from agent.sim import SimServer, Simulator
from agent.store.log import EventLog
from tests.fakes.openai_server import FakeOpenAI, reply, text_tool_call
from tests.tamper import Tamper

SIM_KEY = "sim-key-doctor-1234"


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """cli.main points structlog at this test's captured stderr; later tests must not log into it."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


@pytest.fixture
def sim_server() -> Iterator[SimServer]:
    server = SimServer(Simulator(seed=7, api_key=SIM_KEY)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake_model() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(model="fake-model", models=("fake-model", "other-model")) as fake:
        yield fake


def make_setup(root: Path, vast_url: str, model_block: str) -> Path:
    """A config, a knowledge dir and an initialised database under ``root``."""
    (root / "knowledge").mkdir(parents=True, exist_ok=True)
    (root / "knowledge" / "notes.md").write_text("prefer RTX 4090\n", encoding="utf-8")
    cfg = root / "config.yaml"
    cfg.write_text(f"""\
agent_id: doc-1
data_dir: ./data
knowledge_dir: ./knowledge
vast:
  url: {vast_url}
  api_key_env: TEST_VAST_KEY
  timeout: 5s
model:
{model_block}
""", encoding="utf-8")
    app = App(config.load(str(cfg)))
    app.init_database()
    app.close()
    return cfg


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections for the whole test: bound but never listening, so no
    other process (another xdist worker's server) can take it between choosing it and connecting to it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    """(exit code, stdout) of one CLI command run in this process."""
    capsys.readouterr()
    code = cli.main(list(argv))
    return code, capsys.readouterr().out


# ------------------------------------------------------------------ status


def seed_log(cfg: Path) -> None:
    """Two ticks' worth of events: observation, model usage, completion, an open alert, an acked one."""
    with EventLog(config.load(str(cfg)).db_path) as lg:
        obs = {"time": 1_750_000_000, "balance": 412.5, "fleet_dph": 0.76, "demand": {"pending": 40, "running": 2,
                                                                                      "completed": 9},
               "instances": [{"id": 101, "gpu_name": "RTX 4090", "num_gpus": 1, "status": "running", "dph": 0.38},
                             {"id": 102, "gpu_name": "RTX 4090", "num_gpus": 1, "status": "loading", "dph": 0.38}]}
        lg.append("tick.started", {"observation": {"instances": [], "balance": 500.0}}, "scheduler", 1)
        lg.append("tick.completed", {"steps": 1, "usage": {}}, "system", 1)
        lg.append("tick.started", {"observation": obs}, "scheduler", 2)
        lg.append("model.request", {"request_hash": "0" * 64, "manifest": {"estimated_tokens": 2650,
                                                                           "calibrated_tokens": 2700}}, "system", 2)
        for p, c, k in ((1200, 80, 0), (1500, 60, 1100)):
            lg.append("model.response", {"text": "ok", "tool_calls": [],
                                         "usage": {"prompt_tokens": p, "completion_tokens": c, "cached_tokens": k}},
                      "model", 2)
        lg.append("tick.completed", {"steps": 2, "usage": {}, "duration_ms": 2100.0}, "system", 2)
        stuck, _ = raise_alert(lg, key="stuck:102", severity="warning", title="instance 102 stuck loading", tick=2)
        acked, _ = raise_alert(lg, key="low-balance", severity="critical", title="balance low", tick=2)
        lg.append("alert.acked", {"alert_id": acked, "by": "alice", "title": "balance low"}, "operator")


def test_status_json_shows_daemon_last_tick_fleet_and_alerts(tmp_path, capsys, sim_server):
    """status --json reports the lock holder, the last tick with summed and cached tokens, the fleet
    from the last observation, only the open alerts, and the last request's size against the budget."""
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    seed_log(cfg)
    code, out = run_cli(capsys, "--config", str(cfg), "status", "--json")
    assert code == 0
    st = json.loads(out)
    assert st["daemon"]["running"] is False
    assert st["last_tick"] == {"tick": 2, "at": st["last_tick"]["at"], "ok": True, "reason": None, "steps": 2,
                               "duration_ms": 2100.0, "tokens": 2840, "prompt_tokens": 2700,
                               "completion_tokens": 140, "cached_tokens": 1100}
    f = st["fleet"]
    assert [i["id"] for i in f["instances"]] == [101, 102]
    assert f["states"] == {"running": 1, "loading": 1} and f["dph"] == 0.76 and f["balance"] == 412.5
    assert f["demand"]["pending"] == 40
    assert [a["title"] for a in st["alerts"]] == ["instance 102 stuck loading"]
    ctx = st["context"]
    assert ctx["budget"] == 30000 and ctx["compact_at"] == 24000
    assert ctx["tokens"] == 2700 and ctx["until_compaction"] == ctx["compact_at"] - 2700
    assert ctx["method"] == "last request" and ctx["as_of"]

    lock = FleetLock(config.load(str(cfg)).data_path).acquire()
    try:
        code, out = run_cli(capsys, "--config", str(cfg), "status", "--json")
    finally:
        lock.release()
    d = json.loads(out)["daemon"]
    assert d["running"] is True and d["holder"].startswith(f"pid {os.getpid()}:")


def test_status_text_is_readable(tmp_path, capsys, sim_server):
    """The text status names the last tick, the fleet line, each instance and each open alert."""
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    seed_log(cfg)
    code, out = run_cli(capsys, "--config", str(cfg), "status")
    assert code == 0
    assert "daemon: not running" in out
    assert "last tick: #2 ok" in out and "2,840 tokens (1,100 cached)" in out
    assert "2 instances (1 loading, 1 running) · $0.76/h · credit $412.50 spendable" in out
    assert "#102 RTX 4090 x1 loading $0.38/h" in out
    assert "alerts: 1 open" in out and "instance 102 stuck loading" in out
    assert "context: " in out and "tokens to go" in out


def test_status_after_a_real_tick(tmp_path, capsys, sim_server, monkeypatch):
    """After one real tick (rules provider, simulator) status shows it completed, with its fleet."""
    from agent.runtime.tick import run_tick

    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    cfg.write_text(cfg.read_text(encoding="utf-8") + f"demand:\n  url: {sim_server.url}/demand\n", encoding="utf-8")
    app = App(config.load(str(cfg)))
    try:
        result = run_tick(app)
        owned = sorted(app.log.store.owned_instance_ids())
    finally:
        app.close()
    assert result.ok, result.reason
    code, out = run_cli(capsys, "--config", str(cfg), "status", "--json")
    st = json.loads(out)
    assert st["last_tick"]["tick"] == 1 and st["last_tick"]["ok"] is True
    assert st["fleet"]["tick"] == 1 and st["fleet"]["balance"] is not None
    assert st["running_tick"] is None
    # The tick rented after it observed an empty fleet: status shows the fleet after the rents.
    assert owned and sorted(i["id"] for i in st["fleet"]["instances"]) == owned
    assert st["fleet"]["acted"] == len(owned)


# ------------------------------------------------------------------ doctor


def openai_block(base_url: str, name: str = "fake-model") -> str:
    return f"  provider: openai\n  base_url: {base_url}\n  name: {name}\n  api_key_env: TEST_MODEL_KEY"


def test_doctor_all_good(tmp_path, capsys, sim_server, fake_model, monkeypatch):
    """With the key accepted, the model listed, a sound database and files in place, every check is
    ok and doctor exits 0; the key itself never appears in the output."""
    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    cfg = make_setup(tmp_path, sim_server.url, openai_block(fake_model.base_url))
    fake_model.enqueue(reply(tool_calls=[("report_status", {"status": "ok"})]))
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    lines = out.strip().splitlines()
    assert code == 0, out
    checks = lines[:-1]
    assert all(line.startswith("ok ") for line in checks), out
    names = [line.split()[1] for line in checks]
    for name in ("config", "secrets", "database", "chain", "sqlite", "vast.ai", "model", "tokens", "knowledge",
                 "prompts"):
        assert name in names
    assert "vast.ai key from $TEST_VAST_KEY" in out and "serves fake-model" in out and "with tool_calls" in out
    assert lines[-1] == f"all {len(checks)} checks ok"
    assert SIM_KEY not in out


def test_doctor_reports_each_failure_with_its_fix(tmp_path, capsys, sim_server, monkeypatch, closed_port):
    """A rejected vast.ai key (401), an unreachable model endpoint and an edited event row each
    show as FAIL with a fix, and doctor exits 1; the wrong key is never printed."""
    wrong = "wrong-key-5678"
    monkeypatch.setenv("TEST_VAST_KEY", wrong)
    cfg = make_setup(tmp_path, sim_server.url, openai_block(f"http://127.0.0.1:{closed_port}/v1"))
    db = config.load(str(cfg)).db_path
    with EventLog(db) as lg:
        lg.append("operator.note", {"text": "keep two 4090s", "by": "alice"}, "operator")
        lg.append("operator.note", {"text": "second", "by": "bob"}, "operator")
    with Tamper(db) as t:
        t.set(1, payload='{"by":"alice","text":"keep ten 4090s"}')

    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    assert code == 1
    by_name = {line.split()[1]: line for line in out.splitlines() if line.startswith(("ok ", "FAIL "))}
    assert by_name["vast.ai"].startswith("FAIL") and "key rejected" in by_name["vast.ai"]
    assert "HTTP 401" in by_name["vast.ai"] and "fix: check the vast.ai API key" in by_name["vast.ai"]
    assert by_name["model"].startswith("FAIL") and "unreachable" in by_name["model"]
    assert "fix: start the model server, or fix model.base_url" in by_name["model"]
    assert by_name["chain"].startswith("FAIL") and "seq 1" in by_name["chain"] and "fix: " in by_name["chain"]
    assert by_name["database"].startswith("ok")
    assert out.strip().splitlines()[-1].startswith("3 of ")
    assert wrong not in out


def test_doctor_model_not_served_and_rules_skip(tmp_path, capsys, sim_server, fake_model, monkeypatch):
    """A model the endpoint does not list fails naming what it lists; the rules provider skips the
    model check."""
    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    cfg = make_setup(tmp_path, sim_server.url, openai_block(fake_model.base_url, name="missing-model"))
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    assert code == 1
    line = next(x for x in out.splitlines() if x.split()[1] == "model")
    assert "does not serve 'missing-model'" in line and "fake-model, other-model" in line and "fix: " in line

    cfg2 = make_setup(tmp_path / "rules", sim_server.url, "  provider: rules")
    code, out = run_cli(capsys, "--config", str(cfg2), "doctor")
    assert code == 0, out
    assert "skipped: rules provider" in out


def test_doctor_missing_pieces(tmp_path, capsys, sim_server, monkeypatch):
    """No key, no database and no knowledge directory each fail with the way to fix them; an
    invalid config fails the first check and stops there."""
    monkeypatch.delenv("TEST_VAST_KEY", raising=False)
    monkeypatch.delenv("CREDENTIALS_DIRECTORY", raising=False)
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    (tmp_path / "knowledge" / "notes.md").unlink()
    (tmp_path / "knowledge").rmdir()
    for f in (tmp_path / "data").iterdir():
        f.unlink()
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    assert code == 1
    assert "FAIL secrets" in out and "set $TEST_VAST_KEY" in out
    assert "FAIL database" in out and "fleet-agent init" in out
    assert "FAIL knowledge" in out and "mkdir -p" in out
    assert not (tmp_path / "data" / "fleet-agent.db").exists()

    cfg.write_text("schedule:\n  intervall: 5m\n", encoding="utf-8")
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    assert code == 1
    lines = out.strip().splitlines()
    assert lines[0].startswith("FAIL config") and "did you mean 'schedule.interval'" in lines[0]
    assert len(lines) > 3 and lines[-1].endswith("checks failed")  # a broken section: the other checks still run

    cfg.write_text("agent_id: Not An Id\n", encoding="utf-8")  # where the log is: nothing else can be checked
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    lines = out.strip().splitlines()
    assert code == 1 and lines[0].startswith("FAIL config") and "agent_id" in lines[0]
    assert lines[-1] == "1 of 1 checks failed"


def test_doctor_checks_the_demand_source(tmp_path, capsys, sim_server, monkeypatch, closed_port):
    """A configured demand.url is read once: the simulator's queue is ok with its pending count; a
    closed port fails with the fix; no demand.url is reported as not configured, not as a failure."""
    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    cfg = make_setup(tmp_path, sim_server.url, "  provider: rules")
    text = cfg.read_text(encoding="utf-8")
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    assert code == 0 and "ok   demand     not configured" in out, out

    cfg.write_text(text + f"demand:\n  url: {sim_server.url}/demand\n", encoding="utf-8")
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    line = next(x for x in out.splitlines() if x.split()[1] == "demand")
    assert code == 0 and line.startswith("ok") and " pending, " in line, out

    cfg.write_text(text + f"demand:\n  url: http://127.0.0.1:{closed_port}/demand\n", encoding="utf-8")
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    line = next(x for x in out.splitlines() if x.split()[1] == "demand")
    assert code == 1 and line.startswith("FAIL") and "cannot reach" in line and "fix: check demand.url" in line


def _model_line(capsys: Any, cfg: Any) -> tuple[int, str]:
    code, out = run_cli(capsys, "--config", str(cfg), "doctor")
    return code, next(x for x in out.splitlines() if x.split()[1] == "model")


def test_doctor_model_probe_needs_real_tool_calls(tmp_path, capsys, sim_server, fake_model, monkeypatch):
    """The probe is one small tool-call round trip: a model that answers in plain text, or writes the call
    as text, fails the model check with the server flags that turn tool calling on."""
    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    cfg = make_setup(tmp_path, sim_server.url, openai_block(fake_model.base_url))
    fake_model.enqueue(reply("ok"))
    code, line = _model_line(capsys, cfg)
    assert code == 1 and line.startswith("FAIL") and "answered without a tool call" in line
    assert "--enable-auto-tool-choice --tool-call-parser hermes" in line and "--jinja" in line
    fake_model.enqueue(text_tool_call("report_status", {"status": "ok"}, "tagged"))
    code, line = _model_line(capsys, cfg)
    assert code == 1 and "wrote the call as text" in line
    probe = fake_model.chat_requests[-1].json
    assert [t["function"]["name"] for t in probe["tools"]] == ["report_status"]


@pytest.mark.parametrize(("style", "where"), [("vllm", "max_model_len in /v1/models"),
                                              ("llama.cpp", "n_ctx in /props"),
                                              ("ollama", "num_ctx from Ollama's /api/show")])
def test_doctor_reads_the_servers_window_and_fails_a_budget_it_cannot_hold(tmp_path, capsys, sim_server, fake_model,
                                                                         monkeypatch, style, where):
    """Each server's own report of its window is read (vLLM, llama.cpp, Ollama); a window smaller than
    context.budget_tokens but no smaller than the smallest budget that works fails with the budget that would
    fit, a larger one passes and is shown."""
    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    fake_model.window_style = style
    fake_model.context_window = 24576
    cfg = make_setup(tmp_path, sim_server.url, openai_block(fake_model.base_url))  # the default budget: 30,000
    fake_model.enqueue(reply(tool_calls=[("report_status", {"status": "ok"})]))
    code, line = _model_line(capsys, cfg)
    assert code == 1 and line.startswith("FAIL"), line
    assert f"window 24,576 tokens ({where})" in line and "context.budget_tokens (30,000)" in line
    assert "fix: set context.budget_tokens to at most 24,576" in line

    fake_model.context_window = 65536
    fake_model.enqueue(reply(tool_calls=[("report_status", {"status": "ok"})]))
    code, line = _model_line(capsys, cfg)
    assert line.startswith("ok") and f"window 65,536 tokens ({where})" in line, line


@pytest.mark.parametrize("window", [8192, 10240])
def test_doctor_fails_a_window_below_the_smallest_budget_that_works(tmp_path, capsys, sim_server, fake_model,
                                                                    monkeypatch, window):
    """A server whose window (max_model_len in /v1/models, as vLLM reports it) is below the smallest budget
    `config check` accepts with the context caps fails: lowering the budget to the window would leave requests
    trimmed before compaction runs, so the fix is a larger window (or smaller caps), with the size needed."""
    from agent.config import ContextSettings, smallest_budget

    monkeypatch.setenv("TEST_VAST_KEY", SIM_KEY)
    fake_model.context_window = window
    cfg = make_setup(tmp_path, sim_server.url, openai_block(fake_model.base_url))
    fake_model.enqueue(reply(tool_calls=[("report_status", {"status": "ok"})]))
    code, line = _model_line(capsys, cfg)
    low = smallest_budget(ContextSettings())
    assert code == 1 and line.startswith("FAIL"), line
    assert f"window {window:,} tokens (max_model_len in /v1/models)" in line
    assert f"below the smallest budget that works with these context caps ({low:,}" in line
    assert f"fix: start the server with a window of at least {low:,} tokens" in line
    assert "set context.budget_tokens to at most" not in line
