"""Facts from the summarised events: hosts' failures, refusals and last sighting; GPU prices seen.

They are extracted deterministically from the events a compaction folds, carried by the compaction event,
rendered after the summary within ``facts_max_tokens`` (the pinned block before it is untouched), and
answered by the ``recall_facts`` tool from the newest compaction's facts and the events since.
"""

from __future__ import annotations

import json
from typing import Any

from agent.context import render_pinned
from agent.context.facts import fold_facts, render_facts
from agent.runtime.tick import run_tick
from tests.context.test_context import observation
from tests.context.test_context_build import METER, MemLog
from tests.context.test_context_knowledge import _compact
from tests.fakes.openai_server import reply

TABLE = ("offer_id | gpu | $/h | reliability | host | location\n"
         "9001 | RTX 4090 x1 | 0.410 | 0.990 | 4417 | Ontario, CA\n"
         "9002 | RTX 4090 x2 | 0.700 | 0.980 | 5021 | Oslo, NO")


def _incident(log: Any, tick: int) -> None:
    """Host 4417's instance fails (seen in two observations), a search shows its offer, and a rent of that
    offer is refused by policy."""
    for n in (tick, tick + 1):
        obs = observation(n)
        obs["instances"] = [{"id": 77, "gpu_name": "RTX 4090", "num_gpus": 1, "status": "exited", "dph": 0.45,
                             "host_id": 4417},
                            {"id": 78, "gpu_name": "A100", "num_gpus": 1, "status": "running", "dph": 1.2,
                             "host_id": 5021}]
        log.append("tick.started", {"observation": obs}, "scheduler", n)
    calls = [{"id": "s1", "name": "search_offers", "arguments": "{}"},
             {"id": "r1", "name": "rent_instance", "arguments": json.dumps({"offer_id": 9001})}]
    log.append("model.response", {"text": "", "tool_calls": calls}, "model", tick + 1)
    log.append("tool.result", {"call_id": "s1", "name": "search_offers", "ok": True, "output": TABLE}, "tool",
               tick + 1)
    log.append("policy.blocked", {"call_id": "r1", "name": "rent_instance", "rule": "min_reliability",
                                  "detail": "reliability below the floor"}, "system", tick + 1)
    log.append("tool.result", {"call_id": "r1", "name": "rent_instance", "ok": False,
                               "error": "refused by policy"}, "tool", tick + 1)


def test_facts_are_extracted_once_each_and_fold_the_same_in_parts() -> None:
    """One failure of instance 77 on host 4417 (though seen failed twice), one refusal of its offer, the
    last tick each host was seen, price ranges per GPU-hour from observations and search rows; folding
    in two parts (at a boundary a compaction may cut at) equals folding at once."""
    log = MemLog()
    _incident(log, 1)
    facts = fold_facts(None, log.events)
    h = facts["hosts"]["4417"]
    assert (h["failures"], h["refusals"], h["last_seen_tick"]) == (1, 1, 2)
    assert facts["hosts"]["5021"]["failures"] == 0
    assert facts["gpus"] == {"A100": [1.2, 1.2], "RTX 4090": [0.35, 0.45]}
    assert fold_facts(fold_facts(None, log.events[:2]), log.events[2:]) == facts


def test_facts_ride_on_the_compaction_after_the_summary_and_leave_the_pinned_block_alone() -> None:
    """The compaction carries the facts; they render after the summary (host 4417 first: it has
    failures), and the pinned block is the same as without them."""
    log = MemLog()
    log.append("operator.note", {"text": "never rent A100", "by": "alice", "pin": True}, "operator", None)
    _incident(log, 1)
    payload = _compact(log, 3)
    assert payload["facts"]["hosts"]["4417"]["refusals"] == 1
    text = render_facts(payload["facts"], 400, METER)
    assert text is not None and text.splitlines()[1] == "- host 4417: 1 failures, 1 refusals, last seen tick 2"
    pinned = render_pinned(payload["pinned"], payload["covered_to"], __import__("tests.context.test_context_props",
                                                                                fromlist=["S"]).S, METER)
    assert pinned is not None and "host 4417" not in pinned
    assert render_facts(payload["facts"], 40, METER).endswith("recall_facts(gpu=...) has them]")  # type: ignore[union-attr]


def test_recall_facts_answers_for_one_host(make_app: Any, fake_model: Any) -> None:
    """Through a real tick: the model asks recall_facts(host=4417) and reads the host's failures and
    refusals, gathered from the log."""
    app = make_app()
    _incident(app.log, 0)
    fake_model.enqueue(reply("checking", tool_calls=[("recall_facts", {"host": 4417})]), reply("ok"))
    assert run_tick(app).ok
    out = next(e for e in app.log.read(0, kinds=["tool.result"]) if e.payload["name"] == "recall_facts")
    assert out.payload["ok"] and out.payload["output"].startswith("- host 4417: 1 failures, 1 refusals")


def test_each_pinned_block_keeps_its_cap_and_context_shows_them(tmp_path: Any, capsys: Any) -> None:
    """Forty long memories over memory_max_tokens: the pinned block shows those that fit and a marker
    counting the rest; `fleet-agent context` prints each block's tokens against its cap."""
    from dataclasses import replace

    from tests.cli.test_cli_context import cli
    from tests.context.test_context_props import S
    from tests.context.test_replay_inputs import make_app as replay_app

    s = replace(S, memory_max_tokens=300)
    log = MemLog()
    log.append("tick.started", {"observation": observation(1)}, "scheduler", 1)
    for i in range(40):
        log.append("memory.written", {"key": f"host-{i}", "text": f"host {i} was slow on tuesday " * 3}, "model", 1)
    payload = _compact(log, 2)
    text = render_pinned(payload["pinned"], payload["covered_to"], s, METER)
    assert text is not None and "more memories not shown for space (block cap 300 tokens)" in text
    from agent.context.pinned import block_tokens

    assert block_tokens(text, None, METER)["memory"] <= 300
    app = replay_app(tmp_path)
    app.settings.context = s
    for e in log.events:
        if e.kind != "model.request":
            app.log.append(e.kind, e.payload, e.source, e.tick)
    capsys.readouterr()
    assert cli(app, "context") == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("blocks: "))
    assert line.startswith("blocks: directives 0/2,000 · operator 0/2,000 · memory ") and " · knowledge 0/900 · facts " in line
    assert int(line.split(" · memory ")[1].split("/")[0]) <= 300 and line.endswith("/400")
