"""The grammar from operators' words to constraints, measured on a corpus of real-looking notes
(tests/data/operator_notes.json): at least 95 % of the notes give exactly the constraints they should, in
the dev part and in the held-out part, and no note gives a constraint that widens what the fleet may do.

``pytest tests/fleet/test_constraints.py -s -k figures`` prints the figures (exact / partial / wrong, of which
widening) for each part."""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agent.fleet.constraints import Constraint, extract
from agent.times import parse_ts

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "data" / "operator_notes.json").read_text(encoding="utf-8"))
NOW: datetime = parse_ts(CORPUS["now"])
NOTES: list[dict[str, Any]] = CORPUS["notes"]

Key = tuple[str, Any, str | None]


def _key(kind: str, value: Any, until: str | None) -> Key:
    v = tuple(sorted(value)) if isinstance(value, list) else float(value) if isinstance(value, int | float) \
        and not isinstance(value, bool) else value
    return kind, v, until[:16] if until else None


def _got(note: dict[str, Any]) -> set[Key]:
    return {_key(c.kind, c.value, c.until) for c in extract(note["text"], NOW).constraints}


def _want(note: dict[str, Any]) -> set[Key]:
    return {_key(c["kind"], c["value"], c.get("until")) for c in note["expect"]}


def _widens(got: Key, want: set[Key]) -> bool:
    """True when an extracted constraint lets the fleet do something the note forbids: a looser cap or
    reliability floor than meant, an allow-list naming a model the note did not allow, or a shorter time
    than meant for the same rule."""
    kind, value, until = got
    for wk, wv, wu in want:
        if wk != kind:
            continue
        if kind == "allow_gpus" and not set(value) <= set(wv):
            return True
        if kind.startswith("max_") and value > wv:
            return True
        if kind == "min_reliability" and value < wv:
            return True
        if value == wv and wu != until and (until is not None and (wu is None or until < wu)):
            return True
    return False


def grade(note: dict[str, Any]) -> str:
    """exact | partial (a subset of what it should give, nothing else) | wrong | widening."""
    got, want = _got(note), _want(note)
    if any(_widens(g, want) for g in got - want):
        return "widening"
    if got == want:
        return "exact"
    return "partial" if got < want else "wrong"


def _figures(split: str) -> Counter[str]:
    return Counter(grade(n) for n in NOTES if n["split"] == split)


def test_the_corpus_is_large_varied_and_split():
    """At least 200 notes, both parts present, every expected constraint of a known kind."""
    assert len(NOTES) >= 200
    assert {n["split"] for n in NOTES} == {"dev", "held-out"}
    assert len({n["text"] for n in NOTES}) == len(NOTES)
    kinds = {c["kind"] for n in NOTES for c in n["expect"]}
    assert kinds <= set(__import__("agent.fleet.constraints", fromlist=["KINDS"]).KINDS)
    assert sum(1 for n in NOTES if not n["expect"]) >= 20  # negations and plain advice give nothing


@pytest.mark.parametrize("split", ["dev", "held-out"])
def test_at_least_95_percent_exact_and_nothing_widens(split):
    f = _figures(split)
    total = sum(f.values())
    bad = [(n["id"], n["text"], sorted(map(str, _got(n))), sorted(map(str, _want(n))))
           for n in NOTES if n["split"] == split and grade(n) != "exact"]
    assert f["widening"] == 0, bad
    assert f["exact"] / total >= 0.95, bad


def test_figures():
    """Prints the figures (run with -s -k figures)."""
    for split in ("dev", "held-out"):
        f = _figures(split)
        total = max(1, sum(f.values()))
        print(f"\n{split}: {total} notes  exact {f['exact']} ({f['exact'] / total:.1%})  partial {f['partial']}  "
              f"wrong {f['wrong'] + f['widening']} (widening {f['widening']})")
        for n in NOTES:
            if n["split"] == split and grade(n) != "exact":
                print(f"  {grade(n):<8} {n['id']} {n['text']!r}: got {sorted(map(str, _got(n)))}")
    assert NOTES


@pytest.mark.parametrize("text, hosts", [
    ("Avoid hosts 67568, 83792: flaky", {67568, 83792}),
    ("avoid host 67568.", {67568}),
    ("avoid host 67568", {67568}),
    ("stay off host 67568: flaky. Also avoid 83792.", {67568, 83792}),
])
def test_an_id_before_punctuation_or_at_the_end_is_kept(text, hosts):
    assert {c.value for c in extract(text, NOW).constraints if c.kind == "exclude_host"} == hosts


@pytest.mark.parametrize("text", ["don't avoid host 5123", "it's fine to use 3090s", "host 5123 is fine now",
                                  "no need to pause", "unban host 41234", "you may rent A100s again"])
def test_negations_and_permissions_give_nothing(text):
    ex = extract(text, NOW)
    assert ex.constraints == () and ex.advice


def test_an_unreadable_time_limit_leaves_the_rule_open_ended_and_says_so():
    ex = extract("avoid host 41234 until the cows come home", NOW)
    assert ex.constraints == (Constraint("exclude_host", 41234, None),)
    assert "not understood" in ex.problems[0]
