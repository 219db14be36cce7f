"""The two records of agent/store/segments.py: a segment's stub row and an object store's key pair.

Apart from the file operations so that opening the log (which makes a ``SegmentFiles``) does not build
them: a command that reads no segment never needs either. ``agent.store.segments`` still exports both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property

from agent.secrets import Secret


@dataclass(frozen=True)
class Segment:
    """One stub row of the ``segments`` table: what a sealed file holds and how to check it."""

    first_seq: int
    last_seq: int
    name: str
    month: str
    prev_hash: str
    last_hash: str
    first_ts: str
    last_ts: str
    events: int
    kinds: str  # JSON list
    min_tick: int | None
    max_tick: int | None
    bytes: int
    raw_bytes: int
    sha256: str
    sealed_ts: str
    copy_url: str | None = None
    copy_ts: str | None = None
    pruned_ts: str | None = None

    @cached_property
    def kind_set(self) -> frozenset[str]:
        return frozenset(json.loads(self.kinds))

    def may_hold(self, *, since: int, until_seq: int | None, since_ts: str | None, until_ts: str | None,
                 kinds: frozenset[str] | None, tick: int | None) -> bool:
        """False when no event of this segment can match the filter (its stub says so)."""
        if self.last_seq <= since or (until_seq is not None and self.first_seq > until_seq):
            return False
        if (since_ts is not None and self.last_ts < since_ts) or (until_ts is not None and self.first_ts > until_ts):
            return False
        if kinds is not None and not (kinds & self.kind_set):
            return False
        return tick is None or (self.min_tick is not None and self.max_tick is not None
                                and self.min_tick <= tick <= self.max_tick)


@dataclass(frozen=True)
class S3Credentials:
    """An access key pair for object storage; the secret never prints."""

    key_id: Secret
    secret: Secret
