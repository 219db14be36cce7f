"""What binds is restated where the model looks: after a compaction (the fallback summariser's too) the
pinned block of every request names each override, the pause, each host exclusion and each accepted
machine exclusion, with who set it and when it ends; the fallback summary's operator section keeps
overrides, exclusions, pauses, accepted constraints and config changes; a config edit reaches the model as
a tagged operator message."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from agent.fleet import steering
from tests.context.test_compaction import run_compact
from tests.context.test_context import SMALL, open_log, proj, simple_tick


def _messages(log: Any) -> list[str]:
    return [str(m.get("content") or "") for m in proj(log).messages]


def _pinned(log: Any) -> str:
    return next((c for c in _messages(log) if c.startswith("[pinned ·")), "")


def _steer(log: Any) -> None:
    log.append("policy.overridden", {"key": "max_instances", "value": 2, "by": "alice", "reason": "budget review",
                                     "until": "2026-12-04T00:00:00.000000Z", "config_value": 8}, "operator")
    steering.exclude_host(log, 67568, by="bob", reason="flaky disk", source="operator", until=None)
    steering.exclude_host(log, 83792, by="bob", reason="slow", source="operator", until=None)
    steering.pause(log, by="carol", reason="billing check", until="2026-12-02T00:00:00.000000Z")
    log.append("constraint.proposed", {"constraint": "exclude_machine", "value": 4411, "source": "note",
                                       "by": "dave", "text": "pls avoid machine 4411"}, "operator")
    seq = log.last_seq()
    log.append("constraint.accepted", {"proposal_id": seq, "by": "dave", "constraint": "exclude_machine",
                                       "value": 4411, "effect": "machine 4411 excluded"}, "operator")
    log.append("config.changed", {"config_hash": "b" * 64, "previous_hash": "a" * 64, "changes": [
        {"key": "policy.max_instances", "old": 8, "new": 6}]}, "system")


def test_the_pinned_block_restates_what_binds_after_a_compaction_with_who_and_until(tmp_path):
    log = open_log(tmp_path / "a.db")
    simple_tick(log, 1)
    _steer(log)
    for n in range(2, 12):
        simple_tick(log, n)
    assert "## In force now" not in _pinned(log)  # before any compaction the thread holds each event verbatim
    assert run_compact(log, None, force=True) is not None  # fallback summariser
    pinned = _pinned(log)
    assert "## In force now" in pinned
    lines = pinned.splitlines()
    for want in ("[policy override #", "· alice] max_instances 2 until 2026-12-04 00:00 UTC — budget review",
                 "· bob] host 67568 until included: rents on it are refused — flaky disk",
                 "· bob] host 83792 until included", "· carol] PAUSED since ", "until 2026-12-02 00:00 UTC",
                 "accepted · dave] machine 4411 excluded until an operator ends it"):
        assert any(want in ln for ln in lines), (want, pinned)

    # what ends leaves the block at the next compaction
    steering.include_host(log, _settings_without_hosts(), 83792, by="bob", reason="fixed")
    for n in range(12, 20):
        simple_tick(log, n)
    assert run_compact(log, None, force=True) is not None
    pinned = _pinned(log)
    assert "host 67568" in pinned and "host 83792" not in pinned


def test_the_fallback_summary_keeps_overrides_exclusions_pauses_and_config_changes(tmp_path):
    log = open_log(tmp_path / "b.db")
    simple_tick(log, 1)
    _steer(log)
    for n in range(2, 12):
        simple_tick(log, n)
    roomy = replace(SMALL, summary_max_tokens=1500)  # room for every line: what is kept when space is short
    e = run_compact(log, None, settings=roomy, force=True)  # is the newest, as for every section
    assert e is not None and e.payload["method"] == "fallback"
    section = e.payload["summary"].split("## Operator directives", 1)[1].split("\n## ", 1)[0]
    for want in ("policy override #", "max_instances 2 until 2026-12-04 00:00 UTC", "host 67568 excluded by bob",
                 "fleet paused", "constraint #", "exclude_machine 4411",
                 "config change: policy.max_instances 8 -> 6"):
        assert want in section, (want, section)


def test_a_config_change_reaches_the_model_as_a_tagged_operator_message(tmp_path):
    log = open_log(tmp_path / "c.db")
    simple_tick(log, 1)
    log.append("config.changed", {"config_hash": "b" * 64, "previous_hash": "a" * 64, "changes": [
        {"key": "policy.max_instances", "old": 8, "new": 6}]}, "system")
    simple_tick(log, 2)
    assert "[config change · policy.max_instances 8 → 6]" in _messages(log)


def _settings_without_hosts() -> Any:
    from agent.config import Settings

    return Settings()
