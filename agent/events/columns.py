"""The instance records of a tick's observation as columns (``tick.started`` v3's stored form).

Pure functions with no import of the vocabulary, so that the log can decode a v3 row for a command that
never loads the event kinds (``agent.events.decode``); agent/events/kinds_storage2.py defines the version.
"""

from __future__ import annotations

import copy
from typing import Any

from agent.errors import PayloadError
from agent.events.event import JsonObject
from agent.events.stored import Stored

KIND = "tick.started"


def _same_json(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same JSON value, type included (1, 1.0 and true differ)."""
    from agent.store.log import canonical  # the log's own canonical form (agent.store imports this package)

    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)  # -0.0 == 0.0, but they are written apart
    return bool(a == b) if isinstance(a, str | int) or a is None else canonical(a) == canonical(b)


def pack_instances(records: list[Any]) -> Any:
    """``records`` as the v3 table, or as they are when they are not records that all share their keys."""
    if not records or not all(isinstance(r, dict) for r in records):
        return records
    keys = sorted(records[0])
    if any(len(r) != len(keys) or any(k not in r for k in keys) for r in records):
        return records
    columns: dict[str, list[Any]] = {}
    same: dict[str, Any] = {}
    for k in keys:
        first = records[0][k]
        if k != "id" and all(_same_json(r[k], first) for r in records[1:]):
            same[k] = first
        else:
            columns[k] = [r[k] for r in records]
    return {"n": len(records), "columns": columns, "same": same}


def unpack_instances(stored: Any) -> Any:
    """The records a v3 table holds (``pack_instances`` reversed); anything else as it is."""
    if not isinstance(stored, dict):
        return stored
    n, columns, same = stored.get("n"), stored.get("columns"), stored.get("same")
    if (type(n) is not int or not isinstance(columns, dict) or not isinstance(same, dict) or len(stored) != 3
            or any(not isinstance(v, list) or len(v) != n for v in columns.values()) or set(columns) & set(same)):
        return stored
    keys = sorted([*columns, *same])
    return [{k: columns[k][j] if k in columns else copy.deepcopy(same[k]) for k in keys} for j in range(n)]


def _encode(p: JsonObject) -> JsonObject:
    obs = p.get("observation")
    if not isinstance(obs, dict) or "instances" not in obs:
        return p
    records = obs["instances"]
    if not isinstance(records, list):
        raise PayloadError(f"{KIND}: observation.instances must be a list of instance records, "
                           f"got {type(records).__name__}")
    return {**p, "observation": {**obs, "instances": pack_instances(records)}}


def _decode(p: JsonObject) -> JsonObject:
    obs = p.get("observation")
    if not isinstance(obs, dict) or not isinstance(obs.get("instances"), dict):
        return p
    return {**p, "observation": {**obs, "instances": unpack_instances(obs["instances"])}}


INSTANCE_COLUMNS = Stored(encode=_encode, decode=_decode)
