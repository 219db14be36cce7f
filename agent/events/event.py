"""One row of the log, as readers see it: the stored kind, version and payload."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SOURCES = ("scheduler", "model", "tool", "operator", "system")

JsonObject = dict[str, Any]
"""A JSON object as parsed by ``json.loads``."""
JsonArray = list[Any]
"""A JSON array as parsed by ``json.loads``."""
Message = dict[str, Any]
"""One chat message in the OpenAI shape (role, content, tool_calls, tool_call_id)."""


@dataclass(frozen=True)
class Event:
    """One row of the log. ``payload`` and ``version`` are what was stored: the hash
    covers them, so readers upcast a copy (``agent.events.upcast``), never the row. A version that
    stores a smaller form (``Version.stored``) is read back decoded: ``payload`` is what was appended,
    ``agent.events.stored_payload`` the form the row holds."""

    seq: int
    id: str
    ts: str
    kind: str
    source: str
    tick: int | None
    payload: JsonObject
    tokens: int | None = None
    version: int = 1
    prev_hash: str = ""
    hash: str = ""

    def to_dict(self) -> JsonObject:
        return {
            "seq": self.seq,
            "id": self.id,
            "ts": self.ts,
            "kind": self.kind,
            "version": self.version,
            "source": self.source,
            "tick": self.tick,
            "payload": self.payload,
            "tokens": self.tokens,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }
