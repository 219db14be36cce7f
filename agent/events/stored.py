"""``Stored``: how a version writes its payload in a smaller form than readers see it.

A module of its own so that decoding a row (``agent.events.decode``) loads neither the vocabulary nor,
for a command that reads no such row, this record.
"""

from __future__ import annotations

from agent.record import record as dataclass  # a dataclass, defined without importing dataclasses

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

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
