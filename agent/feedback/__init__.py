"""The operator's side of the conversation: alerts, knowledge files, notes and directives.

One job per module:

    alerts          raise / repeat / resolve / ack, deduplicated by key
    alert_hook      the operator's notify command, run for each new alert
    conditions      alerts raised by code from each tick's observation
    unmet           demand left unmet for ticks on end, and the cause code finds for it
    underperforming an instance failing between ticks (flapping, restarts, idle GPU, few jobs)
    knowledge       knowledge files: scan for changes, read, history
    knowledge_editor  ``fleet-agent knowledge edit``
    notes           operator notes and pinned directives

Everything here only appends to the event log (each change in one ``BEGIN IMMEDIATE`` transaction,
check and append together), so the operator CLI can use it while the daemon runs; the read models
(``alerts``, ``directives``, ``knowledge``) follow from the events. The names below are the public
surface callers use (``from agent import feedback``; ``feedback.ack(...)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.lazy import lazy_package

if TYPE_CHECKING:
    from agent.feedback.alert_hook import drain_alert_hooks, notify_alert, run_alert_hook
    from agent.feedback.alerts import (
        SEVERITIES,
        ack,
        alert_lines,
        dispatch_notifications,
        raise_alert,
        resolve_absent,
        resolve_alert,
        silence,
        unsilence,
    )
    from agent.feedback.conditions import check_conditions, note_policy_blocks
    from agent.feedback.knowledge import (
        MAX_KNOWLEDGE_BYTES,
        KnowledgeEntry,
        knowledge_history,
        knowledge_problems,
        knowledge_status,
        read_knowledge,
        scan_knowledge,
        valid_knowledge_name,
    )
    from agent.feedback.knowledge_editor import EditResult, knowledge_edit
    from agent.feedback.notes import MAX_NOTE_CHARS, decode_note, directives, say, unpin, utf8_text

# Each name is imported from its module when first used (agent/lazy.py): importing one module of the package, or
# the package for one name, does not import the others.
EXPORTS = {
    "alert_hook": ("drain_alert_hooks", "notify_alert", "run_alert_hook"),
    "alerts": ("SEVERITIES", "ack", "alert_lines", "dispatch_notifications", "raise_alert", "resolve_absent",
               "resolve_alert", "silence", "unsilence"),
    "conditions": ("check_conditions", "note_policy_blocks"),
    "knowledge": ("MAX_KNOWLEDGE_BYTES", "KnowledgeEntry", "knowledge_history", "knowledge_problems",
                  "knowledge_status", "read_knowledge", "scan_knowledge", "valid_knowledge_name"),
    "knowledge_editor": ("EditResult", "knowledge_edit"),
    "notes": ("MAX_NOTE_CHARS", "decode_note", "directives", "say", "unpin", "utf8_text"),
}
lazy_package(__name__, EXPORTS)

__all__ = [
    "MAX_KNOWLEDGE_BYTES", "MAX_NOTE_CHARS", "SEVERITIES", "EditResult", "KnowledgeEntry", "ack", "check_conditions",
    "alert_lines", "dispatch_notifications", "silence", "unsilence",
    "decode_note", "directives", "drain_alert_hooks", "knowledge_edit", "knowledge_history", "knowledge_problems",
    "knowledge_status", "note_policy_blocks", "notify_alert", "raise_alert", "read_knowledge", "resolve_absent",
    "resolve_alert", "run_alert_hook", "say", "scan_knowledge", "unpin", "utf8_text", "valid_knowledge_name",
]
