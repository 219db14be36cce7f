"""The instance records of a tick's observation as columns (``tick.started`` v3's and v4's stored forms).

Pure functions the log decodes a v3, v4, v5 or v6 row with (``agent.events.decode``); agent/events/kinds/tick.py
defines the versions (v4: a column whose values repeat is stored as its distinct values and an index into them).
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from agent.errors import PayloadError
from agent.events.canonical import canonical
from agent.events.event import JsonObject
from agent.events.stored import Stored

KIND = "tick.started"
_SCALARS = frozenset({str, int, float, bool, type(None)})  # values a record may share without a copy of its own


def _same_json(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same JSON value, type included (1, 1.0 and true differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return repr(a) == repr(b)  # -0.0 == 0.0, but they are written apart
    return bool(a == b) if isinstance(a, str | int) or a is None else canonical(a) == canonical(b)


def _key(v: Any) -> tuple[str, str]:
    """A value's identity as ``_same_json`` sees it (type included), hashable."""
    if isinstance(v, float):
        return "float", repr(v)
    if v is None or isinstance(v, str | int):  # bool is an int subclass: the type name keeps them apart
        return type(v).__name__, repr(v)
    return type(v).__name__, canonical(v)


def dictionary(values: list[Any]) -> Any:
    """``values`` as ``{"index": [...], "values": [...]}`` (each distinct value once, in the order first
    seen, and each value's position in that list) when that is shorter as JSON; else ``values`` as they are."""
    distinct: dict[tuple[str, str], int] = {}
    index: list[int] = []
    for v in values:
        index.append(distinct.setdefault(_key(v), len(distinct)))
    if len(distinct) == len(values):
        return values
    firsts = {i: v for i, v in reversed(list(zip(index, values, strict=True)))}
    packed = {"index": index, "values": [firsts[i] for i in range(len(distinct))]}
    return packed if len(canonical(packed)) < len(canonical(values)) else values


def undictionary(column: Any, n: int) -> list[Any] | None:
    """The ``n`` values a column holds (a list as it is, or a ``dictionary`` form expanded); None when it is
    neither."""
    if isinstance(column, list):
        return column if len(column) == n else None
    if not isinstance(column, dict) or set(column) != {"index", "values"}:
        return None
    index, values = column["index"], column["values"]
    if (not isinstance(index, list) or not isinstance(values, list) or len(index) != n
            or any(type(i) is not int or not 0 <= i < len(values) for i in index)):
        return None
    return [copy.deepcopy(values[i]) for i in index]


def pack_instances(records: list[Any], *, dictionaries: bool = False) -> Any:
    """``records`` as the v3 table (v4 with ``dictionaries``: each column whose values repeat as a
    ``dictionary``), or as they are when they are not records that all share their keys."""
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
            values = [r[k] for r in records]
            columns[k] = dictionary(values) if dictionaries and k != "id" else values
    return {"n": len(records), "columns": columns, "same": same}


def unpack_instances(stored: Any, *, dictionaries: bool = False) -> Any:
    """The records a v3 table holds (``pack_instances`` reversed; a v4 table with ``dictionaries``);
    anything else as it is."""
    if not isinstance(stored, dict):
        return stored
    n, columns, same = stored.get("n"), stored.get("columns"), stored.get("same")
    if (type(n) is not int or not isinstance(columns, dict) or not isinstance(same, dict) or len(stored) != 3
            or set(columns) & set(same)):
        return stored
    lists: dict[str, list[Any]] = {}
    for k, v in columns.items():
        values = undictionary(v, n) if dictionaries else v if isinstance(v, list) and len(v) == n else None
        if values is None:
            return stored
        lists[k] = values
    keys = sorted([*columns, *same])
    if keys and all(type(v) in _SCALARS for v in same.values()):  # the usual table: shared values need no copies
        cols = [lists[k] if k in lists else itertools.repeat(same[k], n) for k in keys]
        return [dict(zip(keys, row, strict=True)) for row in zip(*cols, strict=True)]
    return [{k: lists[k][j] if k in lists else copy.deepcopy(same[k]) for k in keys} for j in range(n)]


def _encode(p: JsonObject, *, dictionaries: bool = False) -> JsonObject:
    obs = p.get("observation")
    if not isinstance(obs, dict) or "instances" not in obs:
        return p
    records = obs["instances"]
    if not isinstance(records, list):
        raise PayloadError(f"{KIND}: observation.instances must be a list of instance records, "
                           f"got {type(records).__name__}")
    return {**p, "observation": {**obs, "instances": pack_instances(records, dictionaries=dictionaries)}}


def _decode(p: JsonObject, *, dictionaries: bool = False) -> JsonObject:
    obs = p.get("observation")
    if not isinstance(obs, dict) or not isinstance(obs.get("instances"), dict):
        return p
    return {**p, "observation": {**obs, "instances": unpack_instances(obs["instances"], dictionaries=dictionaries)}}


INSTANCE_COLUMNS = Stored(encode=_encode, decode=_decode)
"""v3: every column a list."""
INSTANCE_DICTIONARIES = Stored(encode=lambda p: _encode(p, dictionaries=True),
                               decode=lambda p: _decode(p, dictionaries=True))
"""v4: a column whose values repeat as its distinct values and an index, when that is shorter."""
STORED = {3: INSTANCE_COLUMNS, 4: INSTANCE_DICTIONARIES, 5: INSTANCE_DICTIONARIES, 6: INSTANCE_DICTIONARIES}
"""``tick.started``'s stored form by version."""
