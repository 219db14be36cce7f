"""What a request is made of besides events, logged once by content hash so replay never needs today's files.

A request is a function of the log and of five inputs that live outside it: the prompt files (the
system prompt's charter and the summariser's instructions), the fleet policy rendered into the system
prompt, the tool schemas, and the model parameters sent with the messages (temperature, max output
tokens, tool choice). Each is logged as an ``input.recorded`` event carrying its full content the
first time its sha256 appears; a request's manifest already names each by hash. ``replay --verify`` looks
the hashes up here and re-derives the request from what was in force then, so editing prompts/, changing
the policy or upgrading fleet-agent does not break it, while a tampered event still does.

Hashes are those the manifest records: ``prompt_hashes`` (sha256 of each file's bytes), ``policy_hash``,
``tools_hash`` and ``params_hash`` (sha256 of the canonical JSON).

Since ``model.request`` v2 those hashes, the model's name and the budget settings are themselves a
recorded input, ``request`` (agent.events.kinds.model), which a v2 manifest names by its hash
(``inputs``); ``manifest_of`` gives any recorded request's full manifest, whatever its version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.context.build import (
    Projection,
    params_hash,
    request_bundle,
    sha256_text,
    tools_hash,
)
from agent.context.prompts import Prompts
from agent.events import Event
from agent.events.canonical import canonical
from agent.events.kinds.model import REQUEST_INPUT, bundle_hash, join_manifest, split_manifest
from agent.store.log import EventLog

KIND = "input.recorded"


def _inputs(prompts: Prompts, policy: dict[str, Any], tools: list[dict[str, Any]],
            params: list[dict[str, Any]], request: Projection | None = None,
            bundle: tuple[dict[str, Any], str] | None = None) -> list[dict[str, Any]]:
    texts = {"system.md": prompts.system, "summarize.md": prompts.summarize}
    out: list[dict[str, Any]] = [{"name": name, "sha256": prompts.hashes[name], "content": texts[name]}
                                 for name in sorted(texts) if name in prompts.hashes]
    # The projection about to be logged was built from this policy and these tools: its manifest holds their
    # hashes already (the tools' encoding is the largest of a request's inputs).
    m = request.manifest if request is not None else {}
    out.append({"name": "policy", "sha256": m.get("policy_hash") or sha256_text(canonical(policy)), "content": policy})
    out.append({"name": "tools", "sha256": m.get("tools_hash") or tools_hash(tools), "content": tools})
    out.extend({"name": "params", "sha256": params_hash(p), "content": p} for p in params)
    if request is not None:
        content, sha = bundle if bundle is not None else (request_bundle(request), "")
        out.append({"name": REQUEST_INPUT, "sha256": sha or bundle_hash(content), "content": content})
    return out


def recorded(log: EventLog, until_seq: int | None = None) -> dict[str, Any]:
    """Every recorded input's content by its sha256 (up to ``until_seq``)."""
    return {e.payload["sha256"]: e.payload["content"] for e in log.read(0, until_seq=until_seq, kinds=[KIND])}


def record_inputs(log: EventLog, prompts: Prompts, policy: dict[str, Any], tools: list[dict[str, Any]],
                  tick: int | None, *params: dict[str, Any] | None, request: Projection | None = None,
                  bundle: tuple[dict[str, Any], str] | None = None) -> int:
    """Log each input whose hash the log has not seen yet (``params``: the model parameters of the
    requests about to be sent; ``request``: the projection about to be logged as a ``model.request``,
    whose bundle its manifest names, built from ``policy`` and ``tools``; ``bundle``: that bundle and its
    hash when already made); returns how many were logged."""
    seen = log.store.recorded_input_hashes()  # hashes only: the texts are not decoded at every step
    given = [p for p in params if p is not None]
    new = [i for i in _inputs(prompts, policy, tools, given, request, bundle) if i["sha256"] not in seen]
    new = [i for n, i in enumerate(new) if all(j["sha256"] != i["sha256"] for j in new[:n])]
    if new:
        log.append_many((KIND, i, "system", tick) for i in new)
    return len(new)


def log_request(log: EventLog, projection: Projection, *, prompts: Prompts, policy: dict[str, Any],
                tools: list[dict[str, Any]], tick: int | None, params: dict[str, Any] | None = None) -> Event:
    """Log a request about to be sent: the inputs it names that the log lacks (its bundle included), then
    its ``model.request``."""
    content, compact = split_manifest(projection.manifest, projection.request_hash)  # its bundle hashed once
    record_inputs(log, prompts, policy, tools, tick, params, request=projection, bundle=(content, compact["inputs"]))
    return log.append("model.request", {"request_hash": projection.request_hash, "manifest": compact}, "system", tick)


def manifest_of(req: Event, texts: dict[str, Any]) -> dict[str, Any]:
    """The full manifest of a recorded ``model.request``: as stored (v1), or joined with the bundle its
    ``inputs`` names, looked up in ``texts`` (``recorded``). A bundle the log does not hold leaves the
    shared fields out; ``in_force`` reports it missing."""
    m = req.payload["manifest"]
    if req.version < 2 or "inputs" not in m:
        return dict(m)
    bundle = texts.get(m["inputs"])
    return join_manifest(req.payload, bundle if isinstance(bundle, dict) else {})


@dataclass(frozen=True)
class InForce:
    """The inputs a past request was built from: the recorded ones where the log has them, else today's."""

    prompts: Prompts
    policy: dict[str, Any]
    tools: list[dict[str, Any]]
    from_log: tuple[str, ...]   # which inputs came from the log
    params: dict[str, Any] | None = None   # the model parameters, when the manifest names them
    missing: tuple[str, ...] = ()          # inputs the manifest names that the log does not hold


def in_force(manifest: dict[str, Any], texts: dict[str, Any], *, prompts: Prompts, policy: dict[str, Any],
             tools: list[dict[str, Any]]) -> InForce:
    """The inputs of the request ``manifest`` describes, looked up by hash in ``texts`` (``recorded``)."""
    used: list[str] = []
    hashes = dict(manifest.get("prompt_hashes") or {})
    files = {"system.md": prompts.system, "summarize.md": prompts.summarize}
    for name in files:
        h = hashes.get(name)
        if h is not None and h in texts:
            files[name] = texts[h]
            used.append(name)
    if used:
        prompts = Prompts(system=files["system.md"], summarize=files["summarize.md"],
                          hashes={**prompts.hashes, **{k: hashes[k] for k in used}})
    if manifest.get("policy_hash") in texts:
        policy = texts[manifest["policy_hash"]]
        used.append("policy")
    if manifest.get("tools_hash") in texts:
        tools = texts[manifest["tools_hash"]]
        used.append("tools")
    params: dict[str, Any] | None = None
    missing: list[str] = []
    if "inputs" in manifest and manifest["inputs"] not in texts:
        missing.append(f"the request's model, input hashes and settings (inputs {manifest['inputs']})")
    if "params_hash" in manifest:
        params = texts.get(manifest["params_hash"])
        if params is None:
            missing.append(f"model parameters (params_hash {manifest['params_hash']})")
        else:
            used.append("params")
    return InForce(prompts, policy, tools, tuple(used), params, tuple(missing))
