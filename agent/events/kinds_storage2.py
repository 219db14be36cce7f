"""``tick.started`` v3: the observation's instance records stored as columns.

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

As with v3, readers never see it (agent/events/columns.py decodes a row without loading the vocabulary),
the hash covers the stored form, and v4 renders exactly as v2 and v3. Rows written as v3 stay v3. Both
versions are defined here, v3 before v4, because a module that defines a kind's next version must run
after the one that defines the version before.

``tick.started`` v5: a large fleet's observation lists alike instances on one line. Up to v4 the observation
gives every instance a line of its own (``#id GPU xN status age $/h host H``), about 30 tokens each: 500
instances took 16,500 tokens, more than half of the default budget, so every request of a large fleet cut
its own newest observation to fit. v5 renders a fleet of more than ``GROUP_OVER`` instances with the alike
ones (same GPU, count, status, price and status message) on one line, their ids by host and age
(``19 × RTX 4090 x1 running $0.41/h: h13 2h10m #5001 #5007; h12 2h10m #5003``); one not ours keeps its own
line, as does a group of one. 500 instances take about 5,000 tokens. A fleet of ``GROUP_OVER`` or fewer
renders exactly as v2-v4. The payload and its stored form are v4's; rows written as v2-v4 keep their
rendering. It is defined here too, after v4, for the same reason.
"""

from __future__ import annotations

from agent.events.columns import (
    INSTANCE_COLUMNS,
    INSTANCE_DICTIONARIES,
    KIND,
    pack_instances,
    unpack_instances,
)
from agent.events.event import Event, Message
from agent.events.kinds import VOCABULARY, TickStartedV1, _r_tick_started_v2, _same_shape
from agent.events.rendering import inline, render_observation, user
from agent.events.vocabulary import Version

__all__ = ["INSTANCE_COLUMNS", "pack_instances", "unpack_instances"]


VOCABULARY.add_version(KIND, Version(3, TickStartedV1, _r_tick_started_v2, upcast=_same_shape,
                                     stored=INSTANCE_COLUMNS))
VOCABULARY.add_version(KIND, Version(4, TickStartedV1, _r_tick_started_v2, upcast=_same_shape,
                                     stored=INSTANCE_DICTIONARIES))

GROUP_OVER = 40
"""More instances than this in one observation are listed alike-on-one-line (v5)."""


def _r_tick_started_v5(e: Event, p: TickStartedV1) -> Message:
    """As v2, but a fleet of more than ``GROUP_OVER`` instances lists the alike ones on one line."""
    return user(render_observation(e.tick, e.ts, p.observation, inline, group_over=GROUP_OVER))


VOCABULARY.add_version(KIND, Version(5, TickStartedV1, _r_tick_started_v5, upcast=_same_shape,
                                     stored=INSTANCE_DICTIONARIES))
