"""Kinds of a tick: its start (the observation), its end, its failure.

``tick.started`` v3: the observation's instance records stored as columns.

A tick observes every instance on the account, and each record repeated the same twelve key names
(``age_s``, ``dph``, ``gpu_name``, ``host_id``, ``id``, ``intended``, ``label``, ``num_gpus``, ``ours``,
``since``, ``status``, ``status_msg``): with a fleet, nearly half of a ``tick.started`` row was key names.
v3 stores ``observation.instances`` once per event as a table: each key once, the values that differ
from instance to instance as one array per key, and a value every instance shares once (``id`` is
always a column, so a record is found by it even when every other value is shared)::

    "instances": {"n": 3, "columns": {"id": [101, 102, 103], "dph": [0.2, 0.25, 0.31], ...},
                  "same": {"intended": "running", "ours": true, "status_msg": null, ...}}

Readers never see that form: the log decodes a row into the payload it was given (a list of records,
keys and values exactly as appended) wherever it reads one, through ``Vocabulary.decode``, so the
readers of ``observation.instances`` across the code are unchanged. The hash covers the stored form;
``stored_payload`` gives it back for an export or a copy. A list of records that do not all have the
same keys, or an empty one, is stored as it is. v3 renders exactly as v2: the model sees the same text.

``tick.started`` v4: a column whose values repeat is stored once per distinct value. Most columns repeat a
few values: a fleet runs two or three GPU models, its instances are in three or four states, and vast.ai
gives the instances of one host or one image the same message. v4 stores such a column as its distinct
values, in the order first seen, and each instance's position among them, whenever that is shorter as JSON
than the plain array (``id``, and a column of distinct values, stay arrays)::

    "gpu_name": {"index": [0, 0, 1, 0, 2, 1], "values": ["RTX 3090", "RTX 4090", "RTX A6000"]}

As with v3, readers never see it (agent/events/columns.py decodes a row), the hash covers the stored form,
and v4 renders exactly as v2 and v3. Rows written as v3 stay v3.

``tick.started`` v5: a large fleet's observation lists alike instances on one line. Up to v4 the observation
gives every instance a line of its own (``#id GPU xN status age $/h host H``), about 30 tokens each: 500
instances took 16,500 tokens, more than half of the default budget, so every request of a large fleet cut
its own newest observation to fit. v5 renders a fleet of more than ``GROUP_OVER`` instances with the alike
ones (same GPU, count, status, price and status message) on one line, their ids by host and age
(``19 × RTX 4090 x1 running $0.41/h: h13 2h10m #5001 #5007; h12 2h10m #5003``); one not ours keeps its own
line, as does a group of one. 500 instances take about 5,000 tokens. A fleet of ``GROUP_OVER`` or fewer
renders exactly as v2-v4. The payload and its stored form are v4's; rows written as v2-v4 keep their
rendering.

``tick.started`` v6: the observation says what the fleet delivers, not only what it is. Each instance record
adds ``gpu_util`` (vast.ai's reading), ``up_s`` (running since it last started), ``restarts`` (times it stopped
running since rent, a restart between ticks included) and ``jobs`` (jobs it completed, from the queue's
``workers``); the observation adds ``gpu_models`` (per GPU model of ours: instances, ``jobs_per_h`` per GPU,
learned or the prior, ``measured_gpu_h`` and ``usd_per_job``), ``runway_h`` (the credit at the fleet's $/h)
and ``demand.trend_per_h`` (pending jobs' change an hour). v6 renders them: ``· util 93% · up 2h10m · 1 restart
· 41 jobs`` after an instance, a ``per GPU model:`` line, the runway after the balance and the trend after the
demand; a grouped line gives its group's utilisation range and jobs and names a member that restarted. Stored
as v4; rows written as v1-v5 keep their rendering.

``tick.started`` v7: contract ends. vast.ai stops an instance for good at its contract's end date; each instance
record adds ``ends_s``, the seconds until then, set only when that is within ``policy.contract_min_hours`` (null
otherwise). v7 renders it as `` · contract ends in 5 h`` after the instance (``(contract ends in 5 h)`` after a
member of a grouped line). Stored as v4; rows written as v1-v6 keep their rendering.

``tick.started`` v8: a large fleet's observation is as long as its problems, not its size. v5-v7 still name every
instance by id: 500 instances took about 5,700 tokens a tick, none of them cacheable (the observation is the
newest message). v8 renders a fleet of more than ``GROUP_OVER`` instances as its healthy instances of ours (running,
no message, no restart, no contract ending) counted by GPU model, count and status, with their price range and
$/h together, hosts, time in that status, utilisation range and jobs
(``167 × RTX_4090 x1 running · $0.38/h each, $63.46/h · 42 hosts · for 1h05m-5h05m · util 85-99% · 4,321 jobs``),
then the instances needing attention one line each by id, as v7 writes them (at most ``PROBLEMS_SHOWN``, the most
pressing first: not running or with a message, restarted, ending, not ours; the rest counted alike), and at
most ``CHANGES_SHOWN`` changes since the last tick by id (the rest counted alike). The ids of healthy instances
are one ``list_fleet`` call away (``gpu_name``, ``status``). A fleet of ``GROUP_OVER`` or fewer renders as v7
(a long list of changes aside). Stored as v4; rows written as v1-v7 keep their rendering.

v8 observations also say what a figure rests on. Each ``gpu_models`` entry adds ``basis``: ``measured``,
``configured`` (policy.jobs_per_hour_by_gpu), ``dlperf`` (scaled by the model's dlperf from the measured models,
else from policy.jobs_per_hour as the figure for policy.jobs_per_hour_dlperf, agent/fleet/throughput.py) or ``assumed`` (policy.jobs_per_hour), rendered ``(scaled from dlperf 194.7, not yet
measured)`` where v6-v7 said ``(assumed, not yet measured)`` of every model under 1 GPU-h. Each instance record adds
``maint_s``, the seconds until its machine's next maintenance window starts (within ``policy.contract_min_hours``,
null otherwise); ``ends_s`` stays the earlier of that and the contract's end (what the rules read), and an instance
whose stop is the maintenance renders `` · maintenance in 5 h`` (`` · in maintenance`` once it has started) rather
than ``contract ends``. A record without these fields renders as before, so rows written before them keep their
rendering whatever their version. Each instance record also carries ``bid``: an interruptible instance's bid (its
$/h), null for on-demand; a set ``bid`` renders `` bid`` after the $/h.

``tick.started`` v9: the observation says what the fleet needs now, in the terms of the tools. The observation adds
``need`` (agent/fleet/throughput.py ``fleet_need``, sized as the rules provider sizes the fleet: the arrivals plus the
backlog cleared within ``policy.drain_within`` against the jobs/h of ours that run or start; the ``gap`` to rent, the
``surplus`` and ``dead`` instances to destroy), and v9 renders it after the per GPU model line as
``need now: 40.1 jobs/h (arriving 31/h + 61 pending cleared within 1h) · ours deliver 27.8 jobs/h`` and a ``to do:``
line naming the calls (``rent 12.3 jobs/h more: search_offers with {"order": "per_job"} and no other argument,
then rent_instance the offers its last line names``, ``destroy_instance #7 (surplus: ...)``, or nothing to do). A small model reads what to do rather
than working it out from the table. Stored as v4; rows without ``need`` render as v8.

``tick.started`` v10: the observation says what the operators' words in force say and which instances of ours they
bar. The observation adds ``operators_words`` (each rule the directives, knowledge files and the notes in the model's
context give, as ``agent.fleet.constraints`` reads them for the rules provider, described: ``exclude host 63003``,
``allow only GPU models RTX 4090 until 2025-06-16 03:56 UTC``; only when there are any) and ``need`` adds ``barred``
(``[{"id", "why"}]``: instances of ours on an excluded host or of a GPU model no longer allowed, counted out of what
ours deliver so their replacement is in ``gap``) and ``barred_jobs_per_h``. v10 renders ``operators' words in
force: ...`` before the ``need now:`` line, ``not counting 26.9 jobs/h from 4 instances barred below`` after what
ours deliver, and ``destroy_instance #1, #2 (barred: host 63003 is excluded)`` in ``to do:``. A note read as an
order was until then only the note's own message, while ``to do:`` said there was nothing to do: a small model
followed ``to do:``. Stored as v4; rows without these fields render as v9.

v10 observations also count bandwidth. vast.ai bills traffic per GB on top of ``dph_total``, and the credit pays
both: the observation adds ``traffic_dph`` (the traffic $/h of our running instances, each between its last two
billing notes, agent/fleet/market.py ``traffic_dph``; only when any was measured), each ``gpu_models`` entry's
``usd_per_job`` counts its instances' traffic, and ``runway_h`` is the credit over what runs (stopped instances bill
storage only) plus that traffic. The balance line renders ``$4.10/h + $1.20/h traffic``; a row without
``traffic_dph`` renders as before.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.columns import INSTANCE_COLUMNS, INSTANCE_DICTIONARIES
from agent.events.event import Event, JsonArray, JsonObject, Message
from agent.events.kinds.base import VOCABULARY, same_shape
from agent.events.payload import Payload
from agent.events.rendering import (
    inline,
    render_observation,
    user,
)
from agent.events.vocabulary import Version

_define = VOCABULARY.define


# ---------------------------------------------------------------- ticks


@dataclass(frozen=True, kw_only=True)
class TickStartedV1(Payload):
    observation: JsonObject


def _r_tick_started_v1(e: Event, p: TickStartedV1) -> Message:
    """``[tick N · time] observation`` then balance, fleet, demand, instances, changes, alerts, errors."""
    return user(render_observation(e.tick, e.ts, p.observation))


@dataclass(frozen=True, kw_only=True)
class TickCompletedV1(Payload):
    steps: int
    usage: JsonObject | None = None
    actions: JsonArray | None = None
    duration_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class TickFailedV1(Payload):
    reason: str
    error_kind: str | None = None
    steps: int | None = None


def _r_tick_failed_v1(e: Event, p: TickFailedV1) -> Message:
    """``[system · tick N failed] reason``."""
    return user(f"[system · tick {e.tick} failed] {p.reason}")


def _r_tick_started_v2(e: Event, p: TickStartedV1) -> Message:
    """As v1, but every value from vast.ai, the demand source or an alert title is written ``inline``: one
    line, brackets and control characters escaped, so none can spell a source tag or start a line."""
    return user(render_observation(e.tick, e.ts, p.observation, inline))


GROUP_OVER = 40
"""More instances than this in one observation are listed alike-on-one-line (v5)."""


def _r_tick_started_v5(e: Event, p: TickStartedV1) -> Message:
    """As v2, but a fleet of more than ``GROUP_OVER`` instances lists the alike ones on one line."""
    return user(render_observation(e.tick, e.ts, p.observation, inline, group_over=GROUP_OVER))


def _r_tick_started_v6(e: Event, p: TickStartedV1) -> Message:
    """As v5, with each instance's utilisation, uptime, restarts and jobs, each GPU model's jobs/h and $/job,
    the credit runway and the queue's trend."""
    return user(render_observation(e.tick, e.ts, p.observation, inline, group_over=GROUP_OVER, detail=True))


def _r_tick_started_v7(e: Event, p: TickStartedV1) -> Message:
    """As v6, with ``contract ends in 5 h`` after an instance whose contract ends soon."""
    return user(render_observation(e.tick, e.ts, p.observation, inline, group_over=GROUP_OVER, detail=True,
                                   ends=True))


def _r_tick_started_v8(e: Event, p: TickStartedV1) -> Message:
    """As v7, but a fleet of more than ``GROUP_OVER`` instances counts its healthy ones by GPU model and status and
    names only those needing attention; changes past ``CHANGES_SHOWN`` are counted."""
    return user(render_observation(e.tick, e.ts, p.observation, inline, group_over=GROUP_OVER, detail=True,
                                   ends=True, compact=True))


def _r_tick_started_v9(e: Event, p: TickStartedV1) -> Message:
    """As v8, with what the fleet needs now and what that asks of the tick (``need now:``, ``to do:``)."""
    return user(render_observation(e.tick, e.ts, p.observation, inline, group_over=GROUP_OVER, detail=True,
                                   ends=True, compact=True, need=True))


def _r_tick_started_v10(e: Event, p: TickStartedV1) -> Message:
    """As v9, with the operators' words in force and the instances of ours they bar (``operators' words in
    force:``, ``barred:`` in ``to do:``)."""
    return user(render_observation(e.tick, e.ts, p.observation, inline, group_over=GROUP_OVER, detail=True,
                                   ends=True, compact=True, need=True, words=True))


_define("tick.started", "A tick began; its observation of fleet, balance and demand.",
        Version(1, TickStartedV1, _r_tick_started_v1),
        Version(2, TickStartedV1, _r_tick_started_v2, upcast=same_shape),
        Version(3, TickStartedV1, _r_tick_started_v2, upcast=same_shape, stored=INSTANCE_COLUMNS),
        Version(4, TickStartedV1, _r_tick_started_v2, upcast=same_shape, stored=INSTANCE_DICTIONARIES),
        Version(5, TickStartedV1, _r_tick_started_v5, upcast=same_shape, stored=INSTANCE_DICTIONARIES),
        Version(6, TickStartedV1, _r_tick_started_v6, upcast=same_shape, stored=INSTANCE_DICTIONARIES),
        Version(7, TickStartedV1, _r_tick_started_v7, upcast=same_shape, stored=INSTANCE_DICTIONARIES),
        Version(8, TickStartedV1, _r_tick_started_v8, upcast=same_shape, stored=INSTANCE_DICTIONARIES),
        Version(9, TickStartedV1, _r_tick_started_v9, upcast=same_shape, stored=INSTANCE_DICTIONARIES),
        Version(10, TickStartedV1, _r_tick_started_v10, upcast=same_shape, stored=INSTANCE_DICTIONARIES))
_define("tick.completed", "A tick ended normally.", Version(1, TickCompletedV1))


def _r_tick_failed_v2(e: Event, p: TickFailedV1) -> Message:
    """``[system · tick N failed] reason``, the reason (which quotes vast.ai and model errors) ``inline``."""
    return user(f"[system · tick {e.tick} failed] {inline(p.reason)}")


_define("tick.failed", "A tick ended with an error; the schedule continues.",
        Version(1, TickFailedV1, _r_tick_failed_v1),
        Version(2, TickFailedV1, _r_tick_failed_v2, upcast=same_shape))
