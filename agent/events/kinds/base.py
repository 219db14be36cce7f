"""The registry every kind module defines its kinds in, the index of which module defines which kind, and the
upcaster of a version that changed only its rendering.

``MODULES`` names, per module of this package, the kinds it defines: a kind's module is imported when the kind
is first used (``agent.events.vocabulary.Kinds``), so a command that reads a few kinds loads only theirs. A new
kind is added here too (tests/events/test_events_index.py holds the index and the modules equal)."""

from __future__ import annotations

from agent.events.event import JsonObject
from agent.events.vocabulary import Vocabulary

MODULES: dict[str, tuple[str, ...]] = {
    "alerts": ("alert.acked", "alert.notified", "alert.raised", "alert.repeated", "alert.resolved", "alert.retitled",
               "alert.severity_changed", "alert.silenced", "alert.unsilenced"),
    "config": ("config.applied", "config.changed", "config.loaded", "config.refused", "daemon.started",
               "daemon.stopped"),
    "constraints": ("constraint.accepted", "constraint.proposed", "constraint.rejected"),
    "context": ("context.calibrated", "context.compacted", "context.pressure", "input.recorded", "memory.deleted",
                "memory.written", "summary.request", "summary.response"),
    "feedback": ("directive.unpinned", "knowledge.changed", "operator.note"),
    "fork": ("fork.started", "response.overridden"),
    "instances": ("credit.stopped", "instance.adopted", "instance.bid", "instance.gone", "instance.outbid",
                  "instance.traffic", "price.increase", "rent.settled", "system.destroy", "system.drain", "system.start"),
    "leadership": ("leader.acquired", "leader.lost"),
    "model": ("context.step_refused", "model.empty_reply", "model.failed", "model.request", "model.response",
              "model.retry",
              "model.text_tool_calls", "model.window"),
    "steering": ("fleet.paused", "fleet.resumed", "host.excluded", "host.failed", "host.included",
                 "operator.destroy", "operator.drain", "policy.overridden", "policy.override_ended",
                 "steering.in_force"),
    "tick": ("tick.completed", "tick.failed", "tick.started"),
    "tools": ("policy.blocked", "tool.called", "tool.result"),
}

INDEX = {kind: f"agent.events.kinds.{module}" for module, kinds in MODULES.items() for kind in kinds}

STORED_FORMS: frozenset[str] = frozenset({"tick.started"})
"""The kinds with a version whose row holds a smaller form than readers see (``Version.stored``). Reading a row of
any other kind needs no kind module (``status`` reads model responses and tool results without loading theirs);
defining a stored form for a kind not named here fails at import."""

UNSEEN: frozenset[str] = frozenset({
    "alert.notified", "alert.repeated", "alert.retitled", "config.applied", "config.loaded", "config.refused",
    "constraint.proposed", "constraint.rejected", "context.calibrated", "context.compacted", "daemon.started",
    "daemon.stopped", "fork.started", "host.failed", "input.recorded", "instance.adopted", "instance.gone",
    "instance.traffic", "leader.acquired", "leader.lost", "memory.deleted", "memory.written", "model.failed",
    "model.request", "model.retry", "model.window", "policy.blocked", "response.overridden", "summary.request",
    "summary.response", "tick.completed", "tool.called",
})
"""The kinds no version of which renders as a message of the thread. Projecting a context passes over their
events without importing their modules (a thread holds model requests, tool calls, compactions, calibrations);
a kind named here that defines a rendering version fails at import. A new kind that never renders goes here too
(tests/events/test_events_index.py holds this set equal to the kinds without a rendering)."""

VOCABULARY = Vocabulary(INDEX, stored_forms=STORED_FORMS, unseen=UNSEEN)


def same_shape(p: JsonObject) -> JsonObject:
    """The upcaster of a version that changed only the rendering: the payload is unchanged."""
    return p
