"""Bumping a kind's version keeps old events rendering byte for byte; new events use the new rendering.

``probe.answered`` is a test-only kind told in three releases:

    v1  {"host", "ms"}                 renders "[probe · host] answered in N ms"
    v2  "host" renamed to "target"     payload shape only: v1 becomes render=AS_NEXT (upcast, then
                                       rendered by v2, which renders the same text)
    v3  optional "region" added        the rendering changes; v2 keeps its own renderer, frozen

Each release's vocabulary is built as it would have shipped. The golden files in
tests/golden/demo/ were written by the release that introduced each version
(``UPDATE_GOLDEN=1``); every later release must still render that version's samples
to the same bytes.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import pytest

from agent.errors import PayloadError
from agent.events import AS_NEXT, Event, JsonObject, Message, Payload, Version, Vocabulary
from tests.events.test_events_golden import (
    GOLDEN,
    UPDATE,
    Case,
    check_golden,
    envelope,
    golden_path,
    golden_text,
)

DEMO = GOLDEN / "demo"
KIND = "probe.answered"


@dataclass(frozen=True, kw_only=True)
class ProbeV1(Payload):
    host: str
    ms: int


@dataclass(frozen=True, kw_only=True)
class ProbeV2(Payload):
    target: str
    ms: int


@dataclass(frozen=True, kw_only=True)
class ProbeV3(Payload):
    target: str
    ms: int
    region: str | None = None


def _r_v1(e: Event, p: ProbeV1) -> Message:
    return {"role": "user", "content": f"[probe · {p.host}] answered in {p.ms} ms"}


def _r_v2(e: Event, p: ProbeV2) -> Message:
    return {"role": "user", "content": f"[probe · {p.target}] answered in {p.ms} ms"}


def _r_v3(e: Event, p: ProbeV3) -> Message:
    return {"role": "user", "content": f"[probe · {p.target} · {p.region or 'region unknown'}] {p.ms} ms"}


def _v1_to_v2(p: JsonObject) -> JsonObject:
    p["target"] = p.pop("host")
    return p


def _v2_to_v3(p: JsonObject) -> JsonObject:
    p.setdefault("region", None)
    return p


def release(n: int) -> Vocabulary:
    """The vocabulary as release ``n`` shipped it: versions 1..n of probe.answered."""
    shipped: dict[int, list[Version[Any]]] = {
        1: [Version(1, ProbeV1, _r_v1)],
        2: [Version(1, ProbeV1, AS_NEXT), Version(2, ProbeV2, _r_v2, upcast=_v1_to_v2)],
        3: [Version(1, ProbeV1, AS_NEXT), Version(2, ProbeV2, _r_v2, upcast=_v1_to_v2),
            Version(3, ProbeV3, _r_v3, upcast=_v2_to_v3)],
    }
    vocab = Vocabulary()
    vocab.define(KIND, "A probe answered (test-only).", *shipped[n])
    return vocab


SAMPLES: dict[int, list[Case]] = {
    1: [("fast", {"host": "gpu-7", "ms": 12}), ("with an extra key", {"host": "gpu-8", "ms": 300, "note": "x"})],
    2: [("fast", {"target": "gpu-7", "ms": 12})],
    3: [("with a region", {"target": "gpu-7", "ms": 12, "region": "eu-west"}), ("no region", {"target": "g", "ms": 5})],
}


@pytest.mark.parametrize("version", [1, 2, 3])
def test_release_that_introduced_a_version_matches_its_golden_file(version: int) -> None:
    """The release that introduced each version renders its samples to the bytes in its golden file."""
    check_golden(golden_path(DEMO, KIND, version), golden_text(release(version), KIND, version, SAMPLES[version]))


@pytest.mark.skipif(UPDATE, reason="golden files are being written")
@pytest.mark.parametrize(("version", "later"), [(1, 2), (1, 3), (2, 3)])
def test_later_releases_render_old_versions_byte_identical(version: int, later: int) -> None:
    """After each bump, events stored under an older version render exactly as when that version was
    current: v1 through the upcaster and v2's renderer, v2 through its own frozen renderer."""
    want = golden_path(DEMO, KIND, version).read_text(encoding="utf-8")
    assert golden_text(release(later), KIND, version, SAMPLES[version]) == want


def test_new_events_use_the_new_rendering() -> None:
    """An event stored under the current version renders with the current renderer, which differs."""
    vocab = release(3)
    old = vocab.render(envelope(KIND, 2, {"target": "gpu-7", "ms": 12}))
    new = vocab.render(envelope(KIND, 3, {"target": "gpu-7", "ms": 12, "region": "eu-west"}))
    assert old == {"role": "user", "content": "[probe · gpu-7] answered in 12 ms"}
    assert new == {"role": "user", "content": "[probe · gpu-7 · eu-west] 12 ms"}
    assert vocab.kind(KIND).version == 3


def test_upcasting_reads_old_payloads_as_current_without_touching_the_stored_one() -> None:
    """upcast/payload_of give readers a v1 payload in the v3 shape; the stored payload and version are unchanged
    and the upcast event is a copy."""
    vocab = release(3)
    stored = envelope(KIND, 1, {"host": "gpu-7", "ms": 12})
    before = copy.deepcopy(stored.payload)
    assert vocab.payload_of(stored) == ProbeV3(target="gpu-7", ms=12, region=None)
    up = vocab.upcast(stored)
    assert (up.version, up.payload) == (3, {"target": "gpu-7", "ms": 12, "region": None})
    assert (stored.version, stored.payload) == (1, before)
    assert vocab.upcast_payload(KIND, 1, stored.payload, to=2) == {"target": "gpu-7", "ms": 12}
    assert vocab.upcasters.keys() == {(KIND, 1), (KIND, 2)}


def test_appends_validate_against_the_current_version_only() -> None:
    """After the bump, a new payload in the old shape is refused naming the kind and the missing field."""
    with pytest.raises(PayloadError, match=r"probe\.answered: payload is missing required field 'target'"):
        release(3).kind(KIND).validate({"host": "gpu-7", "ms": 12})


def test_a_version_newer_than_this_build_is_refused_clearly() -> None:
    """Rendering an event stored by a newer build (unknown version) raises PayloadError naming kind and version."""
    with pytest.raises(PayloadError, match=r"probe\.answered: stored version 3 is unknown here"):
        release(2).render(envelope(KIND, 3, {"target": "g", "ms": 1}))


def test_inconsistent_version_lists_are_refused_at_definition() -> None:
    """A missing upcaster, a gap in the numbering or a current version rendering AS_NEXT fails at import."""
    bad: list[list[Version[Any]]] = [
        [Version(1, ProbeV1, AS_NEXT), Version(2, ProbeV2, _r_v2)],
        [Version(1, ProbeV1, _r_v1), Version(3, ProbeV3, _r_v3, upcast=_v2_to_v3)],
        [Version(1, ProbeV1, AS_NEXT)],
    ]
    for versions in bad:
        with pytest.raises(ValueError, match=KIND):
            Vocabulary().define(KIND, "bad", *versions)


def test_payload_fields_must_be_json_types() -> None:
    """A payload class with a non-JSON field type, or an optional field that cannot be null, is refused."""

    @dataclass(frozen=True, kw_only=True)
    class Bad(Payload):
        when: bytes

    @dataclass(frozen=True, kw_only=True)
    class NotNullable(Payload):
        ms: int = 0

    for cls in (Bad, NotNullable):
        with pytest.raises(TypeError):
            Vocabulary().define("bad.kind", "bad", Version(1, cls))


def test_a_version_the_model_does_not_see_can_say_what_the_index_holds() -> None:
    """``Version.search`` gives the index text of an invisible version; a version without it gives none
    (the caller falls back to the kind and payload JSON), and so does a kind this vocabulary lacks."""
    vocab = Vocabulary()
    vocab.define("probe.sent", "A probe was sent (test-only).", Version(1, ProbeV1),
                 Version(2, ProbeV2, upcast=_v1_to_v2, search=lambda e, p: f"probe.sent {p.target}"))
    assert vocab.search(envelope("probe.sent", 2, {"target": "gpu-7", "ms": 12})) == "probe.sent gpu-7"
    assert vocab.search(envelope("probe.sent", 1, {"host": "gpu-7", "ms": 12})) is None
    assert vocab.search(envelope("probe.lost", 1, {})) is None

