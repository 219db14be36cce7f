"""Logs written before ``model.request`` v2 keep verifying, replaying and travelling in time after it.

A release before v2 logged every request as v1: a manifest holding the model, the input hashes and the
fourteen budget settings in full, and no ``request`` bundle among the recorded inputs (older still: no
recorded inputs at all). ``v1_log`` writes such a log. The run goes through today's projection,
compaction and input recording, each request stored as the v1 release stored it (version 1, the
projection's whole manifest, which is what its ``request_payload`` returned), and the rows are copied,
chained, into a fresh log through ``EventLog.adopt``, the path a fork takes, which checks every link.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from agent.context import project, project_at, request_payload
from agent.context.compaction import compact
from agent.context.inputs import log_request, manifest_of, record_inputs, recorded
from agent.context.prompts import Prompts
from agent.events import Event
from agent.events.canonical import canonical
from agent.events.kinds.model import SHARED, join_manifest, split_manifest
from agent.runtime.export import Inputs, TrainingReport, training_examples
from agent.store.log import GENESIS, EventLog, row_hash
from tests.cli.test_cli_context import TICKS, cli
from tests.context.test_context import POLICY, TOOLS, Clock
from tests.context.test_context_props import S, run
from tests.context.test_replay_inputs import make_app
from tests.tamper import Tamper


def v1_log(path: Path, prompts: Prompts, ticks: list[dict[str, Any]], *, inputs: bool = True) -> EventLog:
    """A log at ``path`` as a release before v2 wrote ``ticks``: v1 requests, no bundle (``inputs``: the
    prompts, policy and tools recorded, as from the release that began recording them)."""
    scratch = EventLog(path.with_name(path.stem + "-scratch.db"), clock=Clock())
    manifests: dict[int, dict[str, Any]] = {}

    def step(log: EventLog, n: int, state: dict[str, Any], requests: list[Any]) -> None:
        compact(log, prompts, S, policy=POLICY, tools=TOOLS, summarizer=None, tick=n, open_alert_ids=[3],
                owned_instance_ids=[1000])
        p = project(log, prompts, S, policy=POLICY, tools=TOOLS, model="m")
        if inputs:
            record_inputs(log, prompts, POLICY, TOOLS, n)  # what v1 recorded: no request bundle
        manifests[log.append("model.request", request_payload(p), "system", n).seq] = p.manifest

    run(scratch, ticks, step=step)
    rows, prev = [], GENESIS
    for e in scratch.read(0):
        payload, version = e.payload, e.version
        if e.seq in manifests:
            payload, version = {"request_hash": e.payload["request_hash"], "manifest": manifests[e.seq]}, 1
        if e.kind == "tick.started":
            version = 2  # that release stored observations as v2 (instance records as a list)
        h = row_hash(e.seq, e.id, e.ts, e.kind, version, e.source, e.tick, canonical(payload), e.tokens, prev)
        rows.append(dataclasses.replace(e, payload=payload, version=version, prev_hash=prev, hash=h))
        prev = h
    scratch.close()
    log = EventLog(path, clock=Clock())
    log.adopt(rows)
    return log


def requests(log: EventLog) -> list[Event]:
    return list(log.read(0, kinds=["model.request"]))


def verify(app: Any, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = cli(app, "replay", "--verify")
    return code, capsys.readouterr().out


def test_a_v1_log_verifies_and_every_request_replays(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every request of a v1 log stays version 1 with its full manifest, the chain verifies, and
    ``replay --verify`` re-derives each one byte for byte (the summariser's requests too)."""
    app = make_app(tmp_path)
    app.log = v1_log(tmp_path / "fleet.db", app.prompts, TICKS)
    reqs = requests(app.log)
    assert reqs and {r.version for r in reqs} == {1} and all("settings" in r.payload["manifest"] for r in reqs)
    assert not [e for e in app.log.read(0, kinds=["input.recorded"]) if e.payload["name"] == "request"]
    assert app.log.verify().ok
    code, out = verify(app, capsys)
    assert (code, out) == (0, f"replay: {len(reqs)} requests re-derived, every hash matches\n")


def test_context_tick_and_the_training_export_read_a_v1_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """Time travel to a tick of a v1 log gives the request it recorded, with the settings it recorded
    (not today's), and the training export reproduces every answered request."""
    app = make_app(tmp_path)
    app.log = v1_log(tmp_path / "fleet.db", app.prompts, TICKS)
    today = dataclasses.replace(S, budget_tokens=S.budget_tokens * 2)
    for r in requests(app.log)[::3]:
        p = project_at(app.log, app.prompts, today, policy=POLICY, tools=TOOLS, tick=r.tick)
        last = next(app.log.read(0, kinds=["model.request"], tick=r.tick, newest_first=True, limit=1))
        assert p.request_hash == last.payload["request_hash"]
    report = TrainingReport()
    examples = list(training_examples(app.log, Inputs(app.prompts, today, POLICY, TOOLS, "m"), report))
    answered = {e.payload["request_seq"] for e in app.log.read(0, kinds=["model.response"])}
    assert report.unreproducible == [] and len(examples) == report.written == len(answered) > 0


def test_a_v1_log_continued_by_this_release_replays_both_versions(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """An upgraded daemon appends v2 requests after the v1 ones; the bundle is logged once, when the first
    v2 request names it, and replay checks the old and the new requests alike."""
    app = make_app(tmp_path)
    app.log = v1_log(tmp_path / "fleet.db", app.prompts, TICKS[:4])
    old = len(requests(app.log))

    def step(log: EventLog, n: int, state: dict[str, Any], reqs: list[Any]) -> None:
        compact(log, app.prompts, S, policy=POLICY, tools=TOOLS, summarizer=None, tick=n, open_alert_ids=[3],
                owned_instance_ids=[1000])
        p = project(log, app.prompts, S, policy=POLICY, tools=TOOLS, model="m")
        log_request(log, p, prompts=app.prompts, policy=POLICY, tools=TOOLS, tick=n)

    run(app.log, TICKS[4:], step=step)
    reqs = requests(app.log)
    assert [r.version for r in reqs] == [1] * old + [2] * (len(reqs) - old) and len(reqs) > old
    bundles = [e for e in app.log.read(0, kinds=["input.recorded"]) if e.payload["name"] == "request"]
    assert len(bundles) == 1 and bundles[0].seq < next(r.seq for r in reqs if r.version == 2)
    code, out = verify(app, capsys)
    assert (code, out) == (0, f"replay: {len(reqs)} requests re-derived, every hash matches\n")


def test_a_v2_manifest_is_the_v1_manifest_without_what_requests_share(tmp_path: Path) -> None:
    """Split and joined again, a request's manifest is exactly the one the projection wrote; the stored
    v2 manifest holds none of the shared fields and is under half the v1 one's size."""
    app = make_app(tmp_path)
    run(app.log, TICKS[:3])
    p = project(app.log, app.prompts, S, policy=POLICY, tools=TOOLS, model="m")
    bundle, compact_manifest = split_manifest(p.manifest, p.request_hash)
    assert not set(SHARED) & set(compact_manifest) and set(bundle) == set(SHARED) - {"params_hash"}
    assert join_manifest({"request_hash": p.request_hash, "manifest": compact_manifest}, bundle) == {
        **p.manifest, "inputs": compact_manifest["inputs"]}
    stored = log_request(app.log, p, prompts=app.prompts, policy=POLICY, tools=TOOLS, tick=9)
    assert stored.version == 2 and manifest_of(stored, recorded(app.log)) == {**p.manifest,
                                                                             "inputs": compact_manifest["inputs"]}
    assert 2 * len(canonical(stored.payload)) < len(canonical({"request_hash": p.request_hash,
                                                               "manifest": p.manifest}))


def test_replay_fails_when_the_bundle_a_request_names_is_gone_or_changed(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """A v2 request whose bundle was edited (its settings, then its hash) no longer replays: with other
    settings it re-derives differently, and without the bundle replay says which input is missing."""
    app = make_app(tmp_path)

    def step(log: EventLog, n: int, state: dict[str, Any], reqs: list[Any]) -> None:
        p = project(log, app.prompts, S, policy=POLICY, tools=TOOLS, model="m")
        log_request(log, p, prompts=app.prompts, policy=POLICY, tools=TOOLS, tick=n)

    run(app.log, TICKS[:3], step=step)
    assert verify(app, capsys)[0] == 0
    bundle = next(e for e in app.log.read(0, kinds=["input.recorded"]) if e.payload["name"] == "request")
    app.log.close()
    with Tamper(tmp_path / "fleet.db") as t:
        t.rechain(bundle.seq, lambda payload: payload.replace(
            f'"tool_output_max_tokens":{S.tool_output_max_tokens}', '"tool_output_max_tokens":100'))
    app.log = EventLog(tmp_path / "fleet.db", clock=Clock())
    assert f'"tool_output_max_tokens":{S.tool_output_max_tokens}' in canonical(bundle.payload)
    code, out = verify(app, capsys)
    assert code == 1 and "does not match" in out and "not in the log" not in out
    app.log.close()
    with Tamper(tmp_path / "fleet.db") as t:
        t.rechain(bundle.seq, lambda payload: payload.replace(bundle.payload["sha256"], "0" * 64))
    app.log = EventLog(tmp_path / "fleet.db", clock=Clock())
    code, out = verify(app, capsys)
    assert code == 1 and f"(inputs {bundle.payload['sha256']}) not in the log" in out


def test_the_index_finds_a_v2_request_by_its_hash_and_not_by_its_numbers(tmp_path: Path) -> None:
    """``log search`` finds a request by its hash; the manifest's numbers and hashes are not indexed
    (they were a third of the index)."""
    app = make_app(tmp_path)
    run(app.log, TICKS[:1])
    p = project(app.log, app.prompts, S, policy=POLICY, tools=TOOLS, model="m")
    req = log_request(app.log, p, prompts=app.prompts, policy=POLICY, tools=TOOLS, tick=2)
    assert [e.seq for e, _ in app.log.search(p.request_hash)] == [req.seq]
    inputs_hash = req.payload["manifest"]["inputs"]
    assert [e.kind for e, _ in app.log.search(inputs_hash)] == ["input.recorded"]

