"""The log as data: events as JSON lines or Parquet with --kind/--since, and model decisions as OpenAI
fine-tuning examples that hold exactly what the model was sent, with policy-blocked calls marked and
answers an operator overrode left out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from agent.cli import main
from agent.runtime.app import App
from agent.runtime.tick import run_tick
from agent.store.log import EventLog
from tests.conftest import events_of, offer_rows
from tests.fakes.openai_server import reply
from tests.fork.test_fork import _config_file


@pytest.fixture
def fleet(sim_clock, make_app, fake_model, tmp_path) -> tuple[App, Path]:
    """Two ticks through the real SDK: tick 1 searches; tick 2 rents two offers under max_instances 1,
    so the second is refused by policy."""
    app = make_app(policy={"max_instances": 1, "max_rents_per_hour": 100})
    fake_model.enqueue(reply("look", tool_calls=[("search_offers", {})]), reply("nothing yet"))
    assert run_tick(app).ok
    rows = offer_rows(events_of(app, "tool.result", 1)[0].payload["output"])
    sim_clock.advance(300)
    fake_model.enqueue(reply("two", tool_calls=[("rent_instance", {"offer_id": rows[0]["id"], "reason": "a"}),
                                                ("rent_instance", {"offer_id": rows[1]["id"], "reason": "b"})]),
                       reply("done"))
    assert run_tick(app).ok
    assert [e.payload["rule"] for e in events_of(app, "policy.blocked")] == ["max_instances"]
    app.close()
    return app, _config_file(app, tmp_path / "config-file.yaml")


def _events(app: App) -> list[dict[str, Any]]:
    with EventLog(app.settings.db_path, readonly=True) as log:
        return [e.to_dict() for e in log.read()]


def test_jsonl_export_selects_kinds_families_and_since(fleet, capsys):
    """--kind (exact or a family like 'tool.') and --since (a seq or an ISO time) pick exactly those events,
    every field included."""
    app, cfg = fleet
    every = _events(app)
    mid = every[len(every) // 2]
    assert main(["--config", str(cfg), "log", "export", "--kind", "tool.", "--kind", "policy.blocked",
                 "--since", str(mid["seq"])]) == 0
    got = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    want = [e for e in every if e["seq"] > mid["seq"] and (e["kind"].startswith("tool.")
                                                           or e["kind"] == "policy.blocked")]
    assert got == want and got
    t2 = next(e for e in every if e["kind"] == "tick.started" and e["tick"] == 2)
    assert main(["--config", str(cfg), "log", "export", "--since", t2["ts"], "--kind", "tick.started"]) == 0
    assert [json.loads(x)["tick"] for x in capsys.readouterr().out.splitlines()] == [2]


def test_parquet_export_holds_every_event_and_field(fleet, tmp_path, capsys):
    """--format parquet -o FILE writes one row per event with every field; the payload column is the
    canonical JSON of the payload."""
    app, cfg = fleet
    out = tmp_path / "log.parquet"
    assert main(["--config", str(cfg), "log", "export", "--format", "parquet", "-o", str(out)]) == 0
    rows = pq.read_table(out).to_pylist()
    every = _events(app)
    assert f"exported {len(every)} events" in capsys.readouterr().out
    for r in rows:
        r["payload"] = json.loads(r["payload"])
    assert rows == every


def test_parquet_without_pyarrow_is_a_clear_error_and_writes_nothing(fleet, tmp_path):
    """Where pyarrow is not installed, --format parquet exits 1 with one line naming the extra to install
    and the jsonl alternative; no file is written."""
    _, cfg = fleet
    out = tmp_path / "x.parquet"
    code = ("import sys; sys.modules['pyarrow'] = None; from agent.cli import main; "
            f"sys.exit(main(['--config', {str(cfg)!r}, 'log', 'export', '--format', 'parquet', '-o', {str(out)!r}]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert "pip install 'fleet-agent[parquet]'" in p.stderr and "--format jsonl" in p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert not out.exists() and list(tmp_path.glob(".x.parquet*")) == []


def test_training_examples_are_what_the_model_was_sent_blocked_marked_overridden_left_out(
        fleet, fake_model, tmp_path, capsys):
    """`log export --training`: one example per model answer, in the OpenAI fine-tuning chat format with only
    its own keys. Its messages before the answer are byte for byte the messages the model server received,
    its tools the tools it was sent; only the answer has weight 1, and an answer with a refused rent has
    weight 0. The metadata file beside it lists, line for line, the seqs, tick, model and the refused call.
    After `override SEQ` that answer is left out."""
    app, cfg = fleet
    sent = [r.json for r in fake_model.chat_requests]
    out = tmp_path / "train.jsonl"
    assert main(["--config", str(cfg), "log", "export", "--training", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "exported 4 examples (1 with policy-blocked calls), left out 0 overridden" in err
    assert f"metadata in {tmp_path / 'train.metadata.jsonl'}" in err
    examples = [json.loads(x) for x in out.read_text().splitlines()]
    metas = [json.loads(x) for x in (tmp_path / "train.metadata.jsonl").read_text().splitlines()]
    assert len(examples) == len(metas) == len(sent) == 4
    assert [m["line"] for m in metas] == [1, 2, 3, 4]
    for ex, body in zip(examples, sent, strict=True):
        assert set(ex) == {"messages", "tools", "parallel_tool_calls"}
        context = ex["messages"][:-1]
        assert [{k: v for k, v in m.items() if k != "weight"} for m in context] == body["messages"]
        assert ex["tools"] == body["tools"]
        assert ex["messages"][-1]["role"] == "assistant"
        assert all(m["weight"] == 0 for m in context if m["role"] == "assistant")
    (b,) = [m for m in metas if m["policy_blocked"]]
    assert [c["rule"] for c in b["policy_blocked"]] == ["max_instances"]
    blocked = examples[b["line"] - 1]
    assert [c["function"]["name"] for c in blocked["messages"][-1]["tool_calls"]] == ["rent_instance"] * 2
    assert [ex["messages"][-1]["weight"] for ex in examples] == [0 if m is b else 1 for m in metas]

    assert main(["--config", str(cfg), "log", "export", "--training"]) == 0  # to stdout: no metadata file
    strict = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert strict == examples

    seq = b["response_seq"]
    assert main(["--config", str(cfg), "override", str(seq), "--by", "alice", "--note", "no second box"]) == 0
    capsys.readouterr()
    assert main(["--config", str(cfg), "override", str(seq), "--by", "alice"]) == 2
    assert "already marked overridden" in capsys.readouterr().err
    meta = tmp_path / "m.jsonl"
    assert main(["--config", str(cfg), "log", "export", "--training", "--metadata", str(meta)]) == 0
    cap = capsys.readouterr()
    assert "exported 3 examples (0 with policy-blocked calls), left out 1 overridden" in cap.err
    kept = [json.loads(x)["response_seq"] for x in meta.read_text().splitlines()]
    assert kept == [m["response_seq"] for m in metas if m is not b]
    assert main(["--config", str(cfg), "log", "export", "--training", "-o", str(tmp_path / "n.jsonl"),
                 "--no-metadata"]) == 0
    assert not (tmp_path / "n.metadata.jsonl").exists()


def test_a_request_that_no_longer_re_derives_is_left_out_and_the_export_exits_1(fleet, tmp_path, capsys):
    """An example is only ever what the model was sent: when an event inside a request's context was
    edited, that request re-derives to another hash, its example is left out, the command names the count
    and the way to see why, and exits 1."""
    from tests.tamper import Tamper

    app, cfg = fleet
    started = next(e for e in _events(app) if e["kind"] == "tick.started" and e["tick"] == 2)
    with Tamper(app.settings.db_path) as t:
        t.replace_in_payload(started["seq"], '"balance"', '"balancE"')
    out = tmp_path / "t.jsonl"
    assert main(["--config", str(cfg), "log", "export", "--training", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "exported 2 examples" in err and "2 requests did not re-derive (run 'fleet-agent replay --verify')" in err
    assert [json.loads(x)["tick"] for x in (tmp_path / "t.metadata.jsonl").read_text().splitlines()] == [1, 1]
