"""The query language of search and instance listing: filters, ordering, pagination tokens.

Filters are `{field: {op: arg}}` (or `{field: value}` for eq) with the vast.ai operators
eq, neq, gt, gte, lt, lte, in, notin; fields a row lacks are ignored, as the real API does.
"""

from __future__ import annotations

import base64
import binascii
import json
from operator import itemgetter
from typing import Any

from agent.sim.replies import ApiError


def _coerce(arg: Any, like: Any) -> Any:
    if isinstance(like, bool):
        if isinstance(arg, str):
            return arg.strip().lower() in ("true", "1", "yes")
        return bool(arg)
    if isinstance(like, int | float):
        try:
            return float(arg)
        except (TypeError, ValueError):
            return arg
    if isinstance(like, str) and isinstance(arg, str):
        return arg.replace("_", " ")
    return arg


def _eq(value: Any, arg: Any, key: str) -> bool:
    if isinstance(value, str) and isinstance(arg, str):
        v, a = value.replace("_", " ").lower(), arg.lower()
        if key == "geolocation":
            return v == a or v.rsplit(", ", 1)[-1] == a
        return v == a
    return bool(value == arg)


def _match_op(value: Any, op: str, arg: Any, key: str) -> bool:
    if op in ("in", "notin"):
        items = arg if isinstance(arg, list) else [arg]
        hit = any(_eq(value, _coerce(a, value), key) for a in items)
        return hit if op == "in" else not hit
    if op not in ("eq", "neq", "gt", "gte", "lt", "lte"):
        raise ApiError(400, "invalid_args", f"unknown operator {op!r} on {key!r}")
    a = _coerce(arg, value)
    if op == "eq":
        return _eq(value, a, key)
    if op == "neq":
        return not _eq(value, a, key)
    if value is None or a is None:
        return False
    try:
        return bool({"gt": value > a, "gte": value >= a, "lt": value < a, "lte": value <= a}[op])
    except TypeError:
        return False


def matches(row: dict[str, Any], filters: dict[str, Any]) -> bool:
    for key, cond in filters.items():
        if key not in row:
            continue  # unknown fields are ignored, as the real search tolerates extra keys
        if not isinstance(cond, dict):
            cond = {"eq": cond}
        for op, arg in cond.items():
            if not _match_op(row[key], op, arg, key):
                return False
    return True


def sort_rows(rows: list[dict[str, Any]], order: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """Stable multi-column sort, (column, "asc"|"desc") pairs; rows lacking a column go last."""
    out = list(rows)
    for col, direction in reversed(order):
        desc = str(direction).lower() == "desc"
        present = [r for r in out if r.get(col) is not None]
        missing = [r for r in out if r.get(col) is None]
        present.sort(key=itemgetter(col), reverse=desc)
        out = present + missing
    return out


def page_token(offset: int) -> str:
    raw = json.dumps({"offset": offset}).encode()
    return "pg_" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def page_offset(token: str) -> int:
    if not token.startswith("pg_"):
        raise ApiError(400, "invalid_args", "bad after_token")
    body = token[3:]
    try:
        data = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
        return max(0, int(data["offset"]))
    except (ValueError, KeyError, TypeError, binascii.Error) as e:
        raise ApiError(400, "invalid_args", "bad after_token") from e
