"""The event log on PostgreSQL through the real CLI and the real server (tests/pgserver.py): init, tick,
notes, verify, search, time travel, rebuild; many fleets in one database; appends from several processes;
append-only enforced by the server; storage.url and its password handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent import cli


def write_config(root: Path, url: str, sim_url: str, *, agent_id: str = "fleet-a", extra: str = "") -> Path:
    (root / "knowledge").mkdir(parents=True, exist_ok=True)
    cfg = root / "config.yaml"
    cfg.write_text(f"""\
agent_id: {agent_id}
data_dir: ./data
knowledge_dir: ./knowledge
vast:
  url: {sim_url}
  timeout: 5s
model:
  provider: rules
schedule:
  max_steps: 3
storage:
  url: "{url}"
{extra}""", encoding="utf-8")
    return cfg


def run(capsys: pytest.CaptureFixture[str], cfg: Path, *argv: str, env: dict[str, str] | None = None
        ) -> tuple[int, str, str]:
    code = cli.main(["--config", str(cfg), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_init_tick_notes_verify_search_and_time_travel_on_postgresql(pg_url, sim, sim_server, tmp_path, capsys,
                                                                     monkeypatch):
    """Every step an operator takes works with storage.url on PostgreSQL: init applies the schema, a tick
    runs and logs, a pinned note becomes a directive, log verify and replay --verify pass, log search finds
    the note through the tsvector index, context --at renders the past, log rebuild --check finds no drift."""
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    cfg = write_config(tmp_path, pg_url, sim_server.url)
    code, out, err = run(capsys, cfg, "init")
    assert code == 0, err
    assert "created postgresql://" in out
    code, out, err = run(capsys, cfg, "say", "--pin", "keep two A100s warm for the batch jobs")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "tick")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "log", "verify")
    assert code == 0, err + out
    assert "verif" in out
    code, out, err = run(capsys, cfg, "log", "search", "A100s", "batch")
    assert code == 0, err
    assert "[batch]" in out or "batch" in out
    code, out, err = run(capsys, cfg, "log", "rebuild", "--check")
    assert code == 0, err + out
    code, out, err = run(capsys, cfg, "replay", "--verify")
    assert code == 0, err + out
    code, out, err = run(capsys, cfg, "context", "--seq", "2")
    assert code == 0, err
    assert "keep two A100s warm" in out
    code, out, err = run(capsys, cfg, "context", "--tick", "1")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "context", "--at", "now")
    assert code == 0, err
    code, out, err = run(capsys, cfg, "status", "--json")
    assert code == 0, err
    assert json.loads(out)
