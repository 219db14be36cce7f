"""Projection: the event log -> the messages of one model request, within the budget.

The request is a pure function of the log up to a sequence number, the prompt
files, the settings, the policy and the tool specs::

    [system]   prompts/system.md rendered with the fleet policy        stable
    [pinned]   directives, memory, knowledge as of the last compaction stable between compactions
    [summary]  the latest context.compacted summary (covers seq <= k)   stable between compactions
    [thread]   every model-visible event with seq > k, in order         append-only

Between compactions a new event only appends to the thread, so each request is
a byte prefix extension of the previous one (providers' prompt caches hit).
Every rendering is deterministic, including the truncation of long tool
outputs, so ``replay --verify`` can re-derive any past request and check its
hash.

The package is two steps. ``load`` reads a projection's inputs through the
event log's read API: the newest ``context.compacted`` (through the kind index),
the events after it and the calibration; the cost does not grow with the length
of the log. ``build`` turns those plain values into messages and a manifest with
no I/O, no logging and no module state. The one thing successive projections share
is a ``ProjectionCache`` of token counts the caller owns and passes in.

    cache.py        ProjectionCache (token counts, bounded) and Meter (token arithmetic through it)
    calibration.py  the provider/estimate ratio
    pinned.py       the pinned block and the summary block
    thread.py       the thread: tool calls paired with results, placeholders, truncation
    build.py        Inputs, select, View, the budget, the manifest, hashes
    load.py         reading inputs from the log; project, project_at, update_calibration
    replay.py       re-deriving recorded requests and explaining a mismatch
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.config import ContextSettings
from agent.lazy import lazy_package

if TYPE_CHECKING:
    from agent.context.build import (
        BUDGET_FIELDS,
        Inputs,
        Projection,
        View,
        assemble,
        budget_fields,
        build,
        fits,
        limit_tokens,
        make_view,
        model_params,
        needs_compaction,
        params_hash,
        request_hash,
        request_payload,
        select,
        settings_from_manifest,
        sha256_text,
        tools_hash,
    )
    from agent.context.cache import Meter, ProjectionCache
    from agent.context.calibration import Calibration
    from agent.context.load import (
        load,
        meter_for,
        project,
        project_at,
        request_of_tick,
        seq_at,
        tokenizer_for,
        update_calibration,
    )
    from agent.context.pinned import (
        MARKER_COST,
        PINNED_KINDS,
        empty_pinned,
        fold_pinned,
        render_pinned,
        render_summary,
    )
    from agent.context.thread import PLACEHOLDER, Entry, build_thread

# Each name is imported from its module when first used (agent/lazy.py): importing one module of the package, or
# the package for one name, does not import the others.
EXPORTS = {
    "build": ("BUDGET_FIELDS", "Inputs", "Projection", "View", "assemble", "budget_fields", "build", "fits",
              "limit_tokens", "make_view", "model_params", "needs_compaction", "params_hash", "request_hash",
              "request_payload", "select", "settings_from_manifest", "sha256_text", "tools_hash"),
    "cache": ("Meter", "ProjectionCache"),
    "calibration": ("Calibration",),
    "load": ("load", "meter_for", "project", "project_at", "request_of_tick", "seq_at", "tokenizer_for",
             "update_calibration"),
    "pinned": ("MARKER_COST", "PINNED_KINDS", "empty_pinned", "fold_pinned", "render_pinned", "render_summary"),
    "thread": ("PLACEHOLDER", "Entry", "build_thread"),
}
lazy_package(__name__, EXPORTS)

__all__ = [
    "BUDGET_FIELDS", "MARKER_COST", "PINNED_KINDS", "PLACEHOLDER", "Calibration", "ContextSettings", "Entry", "Inputs",
    "Meter", "Projection", "ProjectionCache", "View", "assemble", "budget_fields", "build", "build_thread",
    "empty_pinned", "fits", "fold_pinned", "limit_tokens", "load", "make_view", "meter_for", "model_params", "needs_compaction", "params_hash",
    "project", "project_at", "render_pinned", "render_summary", "request_hash", "request_of_tick",
    "request_payload", "select", "seq_at", "settings_from_manifest", "sha256_text", "tokenizer_for", "tools_hash",
    "update_calibration",
]
