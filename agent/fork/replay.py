"""A fork replays what the origin saw until its first different decision, then runs on its own simulator.

While a fork replays, each of its ticks starts as the origin's did: the origin's events between ticks
(operator notes, directives, acks, traffic notes) and its tick's start (the observation as logged, the
alerts, knowledge edits) are appended to the fork as logged. The fork's own model (or the rules provider)
then decides from that context, and when a step's calls are the origin's calls (the same tools with the
same arguments) their results are the origin's as logged: what the searches showed, the instances the
rents got. So a fork without a change sees the market the origin saw, not a simulator's guess at it.

The fork switches to its own simulator, seeded from the origin's state at that moment (seed.py: the
tick's observation, the offers shown up to then, the rents and destroys of the tick's earlier steps):

- at the first step whose calls differ from the origin's;
- at the start of a tick when the previous tick's decisions (fork diff's comparison) differ, when the
  policy in force differs from the one the origin's tick was asked with (a ``--set`` change binds from
  the fork's first tick), when the origin's tick ended before it asked the model, or when the origin's
  log has no such tick.

From then on nothing of the origin is replayed: operator inputs the origin logged after that moment are
not in the fork (the origin's operators answered the origin's fleet, not the fork's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent import logsetup
from agent.context.build import sha256_text
from agent.context.inputs import manifest_of, recorded
from agent.events import Event
from agent.events.canonical import canonical
from agent.fork.diff import _args, decisions
from agent.fork.seed import seeded_simulator
from agent.sim import ManualClock, SimServer
from agent.store.log import EventLog

if TYPE_CHECKING:
    from agent.fleet.pipeline import ToolCall
    from agent.fleet.toolkit import ToolContext
    from agent.runtime.app import App

log_ = logsetup.get_logger(__name__)

# What a tick appends once it asks the model: the fork makes these itself (its own request, compaction).
_ASKING = ("input.recorded", "model.request")
_ASKING_PREFIXES = ("context.", "summary.")


def _asking(e: Event) -> bool:
    return e.kind in _ASKING or e.kind.startswith(_ASKING_PREFIXES)


class Replay:
    """The origin's reads and results, replayed into a fork until it decides differently (see above)."""

    def __init__(self, origin: EventLog, point_seq: int, server: SimServer, clock: ManualClock, *, seed: int,
                 api_key: str, disk_gb: float | None) -> None:
        self.origin = origin
        self.pos = point_seq          # the origin's events up to here are in the fork, or made by it
        self.point_seq = point_seq
        self.server = server
        self.clock = clock
        self.seed = seed
        self.api_key = api_key
        self.disk_gb = disk_gb
        self.live = False
        self.why: str | None = None   # why the fork switched to its own simulator
        self.replayed: list[int] = []  # ticks whose start was the origin's
        self._seqs: dict[int, int] = {}  # origin seq -> the fork's seq of the same event

    # -- the tick's start ------------------------------------------------------------------------

    def start(self, app: App, ctx: ToolContext) -> bool:
        """Append the origin's start of tick ``ctx.tick`` (and what it logged since its last tick) and
        return True, or switch to the simulator and return False (the tick starts on its own)."""
        tick = ctx.tick
        if self.live or tick is None:
            return False
        events = list(self.origin.read(self.pos, tick=tick))
        started = next((e for e in events if e.kind == "tick.started"), None)
        if started is None:
            self._go_live(f"the origin's log has no tick {tick}")
            return False
        if self.replayed and tick - 1 in self.replayed and not self._same(app.log, tick - 1):
            self._go_live(f"tick {tick - 1} decided differently from the origin's")
            return False
        if not self._same_policy(app, events):
            self._go_live(f"the policy in force differs from the one the origin's tick {tick} was asked with",
                          observation=started)
            return False
        asking = next((e for e in events if _asking(e)), None)
        if asking is None:  # it ended before asking the model (vast.ai unavailable): the fork's own start
            self._go_live(f"the origin's tick {tick} ended before it asked the model", observation=started)
            return False
        until = asking.seq - 1
        # The origin's events between its ticks (those of earlier ticks the fork made itself), then this start.
        self._copy(app.log, [e for e in self.origin.read(self.pos, until_seq=until)
                             if e.tick is None or e.tick == tick])
        self.pos = until
        self.replayed.append(tick)
        return True

    def _same(self, fork: EventLog, tick: int) -> bool:
        a, b = decisions(self.origin, [tick])[tick], decisions(fork, [tick])[tick]
        return ([[d.key for d in s] for s in a.steps] == [[d.key for d in s] for s in b.steps]
                and a.alerts == b.alerts and a.end.split(":")[0] == b.end.split(":")[0])

    def _same_policy(self, app: App, events: list[Event]) -> bool:
        req = next((e for e in events if e.kind == "model.request"), None)
        if req is None:
            return True
        then = manifest_of(req, recorded(self.origin, req.seq)).get("policy_hash")
        return then is None or then == sha256_text(canonical(app.policy_dict()))

    # -- a step's calls ---------------------------------------------------------------------------

    def calls(self, ctx: ToolContext, calls: list[ToolCall], step: int) -> tuple[list[str], int] | None:
        """When ``calls`` (the fork's step ``step`` of this tick) are the origin's calls of that step: append
        the origin's results as logged and return (the actions, the policy blocks); else switch to the
        simulator and return None (the calls run there)."""
        if self.live or ctx.tick is None:
            return None
        tick = ctx.tick
        reqs = list(self.origin.read(0, kinds=["model.request"], tick=tick))
        req = reqs[step - 1] if 0 < step <= len(reqs) else None
        resp = None if req is None else next(
            (e for e in self.origin.read(req.seq, kinds=["model.response"], tick=tick)
             if e.payload.get("request_seq") == req.seq), None)
        theirs = [] if resp is None else resp.payload.get("tool_calls") or []
        if [(c["id"], c["name"], _args(c["arguments"])) for c in theirs] != \
                [(c["id"], c["name"], _args(c["arguments"])) for c in calls]:
            self._go_live(f"tick {tick} step {step}: the calls differ from the origin's", ctx=ctx)
            return None
        assert resp is not None
        ids = {c["id"] for c in theirs}
        last = max((e.seq for e in self.origin.read(resp.seq, tick=tick) if e.payload.get("call_id") in ids),
                   default=resp.seq)
        # The calls' events and what an operator logged meanwhile, as the origin logged them.
        done = [e for e in self.origin.read(resp.seq, until_seq=last) if e.tick in (tick, None)]
        self._copy(ctx.log, done)
        self.pos = done[-1].seq if done else resp.seq
        actions = [f"{e.payload['effect']['type']} {e.payload['effect'].get('instance_id')}" for e in done
                   if e.kind == "tool.result" and e.payload.get("effect")]
        return actions, sum(e.kind == "policy.blocked" for e in done)

    # -- copying and switching ---------------------------------------------------------------------

    def _copy(self, fork: EventLog, events: list[Event]) -> None:
        for e in events:
            mine = fork.append(e.kind, self._remap(e.payload), e.source, e.tick)
            self._seqs[e.seq] = mine.seq

    def _remap(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The origin's seqs a payload names (``*_seq``), as the fork's seqs of the same events."""
        out = dict(payload)
        for k, v in payload.items():
            if k.endswith("_seq") and isinstance(v, int) and not isinstance(v, bool) and v > self.point_seq:
                out[k] = self._seqs.get(v, v)
        return out

    def _go_live(self, why: str, *, observation: Event | None = None, ctx: ToolContext | None = None) -> None:
        """Serve a simulator seeded from the origin's state at ``self.pos`` from now on."""
        self.live, self.why = True, why
        obs_event = observation or next(iter(self.origin.read(0, until_seq=self.pos, kinds=["tick.started"],
                                                              newest_first=True, limit=1)), None)
        obs = dict(obs_event.payload["observation"]) if obs_event is not None else {}
        effects = [] if obs_event is None or obs_event.seq > self.pos else [
            e for e in self.origin.read(obs_event.seq, until_seq=self.pos, kinds=["tool.result"])
            if e.payload.get("effect")]
        sim, _, _ = seeded_simulator(self.origin, self.pos, obs, seed=self.seed, time=self.clock(),
                                     api_key=self.api_key, disk_gb=self.disk_gb, clock=self.clock, effects=effects)
        self.server.serve(sim)
        if ctx is not None:
            ctx.refresh()  # the step's calls run against the fleet as it stands now
        log_.info("fork.live", why=why, origin_seq=self.pos)

    def to_dict(self) -> dict[str, Any]:
        return {"replayed_ticks": list(self.replayed), "live": self.live, "why": self.why}
