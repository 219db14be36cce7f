"""Leaner versions of kinds whose payloads repeated the same content at every event.

``model.request`` v2. A v1 manifest carried, at every model step, what stays the same for hundreds of
requests: the model's name, the prompt files' hashes, the policy's, the tool schemas' and the model
parameters' hashes, and the fourteen budget settings. v2 logs those once, as an ``input.recorded``
event named ``request`` whose content is that bundle and whose ``sha256`` is the hash of its canonical
JSON (logged the first time the hash appears, like the prompt texts it names); the manifest keeps what
changes from request to request and names the bundle by hash (``inputs``)::

    {"request_hash": "...", "manifest": {"inputs": "<sha256 of the bundle>", "covered_to": 120,
     "compaction_seq": 121, "thread_to": 188, "thread_events": 41, "calibration": 1.09,
     "calibration_seq": 78, "sections": {...}, "estimated_tokens": 3217, "calibrated_tokens": 3712,
     "shrunk": false}}

The thread the request holds is the seq range ``covered_to + 1 .. thread_to`` (``thread_from`` is not
stored), and the request's hash is stored once, beside the manifest. ``join_manifest`` puts the full
v1-shaped manifest back together from a stored payload and the bundle; readers that need the settings
or the input hashes go through it (agent.context.inputs.manifest_of), readers of the range and the token
counts read the stored manifest as before. Neither version is model-visible; v1 events stay as written
and are read as they were. The full-text index holds a v2 request as its kind and hash (a v1 request's
text was its whole payload JSON: hashes and numbers nobody searches for).
"""

from __future__ import annotations

import hashlib
from typing import Any

from agent.events.event import Event, JsonObject
from agent.events.kinds import VOCABULARY, ModelRequestV1
from agent.events.vocabulary import Version

REQUEST_INPUT = "request"
"""The ``input.recorded`` name of a request's bundle."""

SHARED = ("model", "prompt_hashes", "policy_hash", "tools_hash", "params_hash", "settings")
"""The manifest fields that move to the bundle: the same for every request until a prompt file, the
policy, the tools, the model, its parameters or the budget settings change."""


def bundle_hash(bundle: dict[str, Any]) -> str:
    """sha256 of the bundle's canonical JSON: the hash the manifest names it by."""
    from agent.store.log import canonical  # the log's own canonical form (agent.store imports this package)

    return hashlib.sha256(canonical(bundle).encode("utf-8")).hexdigest()


def split_manifest(manifest: dict[str, Any], request_hash: str | None = None) -> tuple[dict[str, Any], JsonObject]:
    """A full (v1-shaped) manifest as (its bundle, the v2 manifest naming the bundle by hash). ``thread_from``
    and the manifest's copy of ``request_hash`` are left out when ``join_manifest`` gives them back as
    they were (``covered_to + 1`` and the payload's hash)."""
    bundle = {k: manifest[k] for k in SHARED if k in manifest}
    compact: JsonObject = {k: v for k, v in manifest.items() if k not in SHARED}
    if "covered_to" in compact and compact.get("thread_from") == compact["covered_to"] + 1:
        del compact["thread_from"]
    if request_hash is not None and compact.get("request_hash") == request_hash:
        del compact["request_hash"]
    compact["inputs"] = bundle_hash(bundle)
    return bundle, compact


def join_manifest(payload: dict[str, Any], bundle: dict[str, Any]) -> dict[str, Any]:
    """The full manifest of a v2 payload, given the bundle its ``inputs`` names (``split_manifest``
    reversed; the ``inputs`` hash is kept)."""
    m = dict(payload["manifest"])
    full = {**bundle, **m}
    if "covered_to" in m and "thread_from" not in m:
        full["thread_from"] = int(m["covered_to"]) + 1
    full.setdefault("request_hash", payload["request_hash"])
    return full


def _request_v1_to_v2(p: JsonObject) -> JsonObject:
    """A v1 payload as v2 would have stored it (its bundle is not in a v1 log: read v1 events as they are)."""
    _, compact = split_manifest(dict(p["manifest"]), p.get("request_hash"))
    return {**p, "manifest": compact}


def _search_request_v2(e: Event, p: ModelRequestV1) -> str:
    """The kind and the request's hash: the manifest's numbers and hashes are no words to search for."""
    return f"model.request {p.request_hash}"


VOCABULARY.add_version("model.request", Version(2, ModelRequestV1, upcast=_request_v1_to_v2,
                                                search=_search_request_v2))
