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
