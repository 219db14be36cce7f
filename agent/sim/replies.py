"""What a request handler returns (`Reply`) or raises (`ApiError`), and the helpers that build them."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    # Run after the delay, and answered instead: a request that reaches vast.ai only late.
    then: Callable[[], Reply] | None = None


class ApiError(Exception):
    """Answered as `{"success": false, "error": error, "msg": msg}` with `status`."""

    def __init__(self, status: int, error: str, msg: str) -> None:
        super().__init__(msg)
        self.status, self.error, self.msg = status, error, msg


def json_reply(status: int, obj: Any, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, json.dumps(obj).encode(), "application/json", headers or {})


def text_reply(status: int, text: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, text.encode(), "text/plain; charset=utf-8", headers or {})


def as_id(v: Any) -> int:
    """An id from a path segment or a body field; 400 when it is not an integer."""
    try:
        return int(v)
    except (TypeError, ValueError) as e:
        raise ApiError(400, "invalid_args", f"not an id: {v!r}") from e
