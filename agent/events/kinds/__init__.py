"""The vocabulary: every kind, its payload per version, and how each version renders, filed by subject.

To change a kind, add a version (never edit a released one) in the module of its subject: a new payload
class, an upcaster from the previous version, and either a new renderer (the rendering changes for new
events; old ones keep theirs) or ``render=AS_NEXT`` on the previous version (only the payload shape
changed). Then add a sample for the new version to tests/events/test_events_golden.py and write its golden file
(``UPDATE_GOLDEN=1``).

    alerts      alert.* (raised, repeated, acked, resolved, silenced, notified, retitled, severity_changed)
    constraints constraint.proposed/accepted/rejected (operators' words made rules)
    config      daemon.started/stopped, config.loaded/refused/changed/applied
    context     memory.*, context.compacted/calibrated/pressure, input.recorded, summary.*
    feedback    operator.note, directive.unpinned, knowledge.changed
    fork        fork.started, answers overridden
    instances   instance.adopted/gone, rent.settled, system.destroy, credit.stopped, system.start,
                system.drain
    leadership  leader.acquired/lost
    model       model.request/response/failed/retry/window/text_tool_calls, context.step_refused
    steering    policy overrides, pause, hosts, operator destroys and drains, steering.in_force
    tick        tick.started/completed/failed
    tools       tool.called/result, policy.blocked

Each module is imported when one of its kinds is first used (``base.INDEX``), not with this package.
"""

from agent.events.kinds.base import INDEX, VOCABULARY

__all__ = ["INDEX", "VOCABULARY"]
