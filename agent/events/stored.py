"""``Stored``: how a version writes its payload in a smaller form than readers see it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agent.events.event import JsonObject


@dataclass(frozen=True)
class Stored:
    """How a version writes its payload to the log in a smaller form than readers see it. ``encode``
    turns the payload (checked against the version's class) into what the row holds and the hash
    covers; ``decode`` gives the payload back exactly, from any value ``encode`` returned, and returns
    anything else (a row edited behind the log's back) unchanged. ``encode`` is deterministic, so
    ``encode(decode(stored)) == stored`` for every row this version wrote."""

    encode: Callable[[JsonObject], JsonObject]
    decode: Callable[[JsonObject], JsonObject]
