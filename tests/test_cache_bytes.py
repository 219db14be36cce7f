"""The render table's byte bound counts what its entries keep alive, decoded payloads included."""

from __future__ import annotations

import json
import tracemalloc

from agent.context.cache import ProjectionCache
from agent.events import Event


def _observation_text(n: int) -> str:
    """A tick.started payload as stored: many instances of short fields, so its decoded dicts and
    numbers weigh far more than its text."""
    rows = [{"id": i, "gpu": "RTX 4090", "num_gpus": 1, "status": "running", "dph": 0.4, "rel": 0.99}
            for i in range(n)]
    return json.dumps({"observation": {"instances": rows, "balance": 10.0}})


def _decoded_size(text: str) -> tuple[object, int]:
    tracemalloc.start()
    try:
        obj = json.loads(text)
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return obj, size


def test_a_rendered_row_counts_at_least_the_memory_of_its_decoded_payload() -> None:
    """A cached rendering of a row whose payload is mostly small dicts counts at least the bytes json.loads
    allocated for that payload (not the length of its text), and a bound below that keeps nothing."""
    text = _observation_text(200)
    payload, size = _decoded_size(text)
    assert isinstance(payload, dict) and size > 2 * len(text)
    ev = Event(seq=1, id="e1", ts="2026-12-01T00:00:00.000000Z", kind="tick.started", source="scheduler",
               tick=1, payload=payload, hash="h1")
    cache = ProjectionCache()
    msg = cache.render(ev)
    assert msg is not None and len(cache.rendered) == 1
    assert cache.rendered.bytes >= size
    tight = ProjectionCache(max_bytes=(1 << 20, 1 << 20, size))
    assert tight.render(ev) == msg and len(tight.rendered) == 0


def _note(seq: int) -> Event:
    return Event(seq=seq, id=f"e{seq}", ts="2026-12-01T00:00:00.000000Z", kind="operator.note", source="operator",
                 tick=None, payload={"text": f"note {seq}", "by": "alice"}, hash=f"h{seq}")


def test_entries_no_recent_projection_used_are_dropped_and_the_rest_kept() -> None:
    """A row rendered once and then left out of the next KEEP_PROJECTIONS projections (compacted out of
    the thread) leaves the render and count tables; a row every projection renders stays, and a hit after
    the sweep still gives exactly the rendering computed afresh."""
    from agent.tokens import get_tokenizer

    tok = get_tokenizer()
    cache = ProjectionCache()
    kept, gone = _note(1), _note(2)
    m = cache.meter(tok)
    first = m.render(gone)
    assert first is not None
    m.message(first)
    assert len(cache.rendered) == 1 and len(cache.counts) == 1
    for _ in range(ProjectionCache.KEEP_PROJECTIONS + 1):
        m = cache.meter(tok)
        msg = m.render(kept)
        assert msg is not None
        m.message(msg)
    assert len(cache.rendered) == 1 and len(cache.counts) == 1  # only the row still shown
    assert cache.rendered.bytes > 0
    assert cache.meter(tok).render(gone) == first and len(cache.rendered) == 2
