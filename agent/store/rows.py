"""The rows ``Store`` hands out besides alerts and silences: small frozen dataclasses, one per read model or question.

Defined here, apart from agent/store/queries.py, so that a command that asks none of these questions
(``alerts list``) does not build them (each dataclass costs its methods' compilation at import).
``agent.store.queries`` still exports every one of them by name.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Directive", "FailedRun", "Instance", "InstanceState", "Intent", "KnowledgeVersion", "Memory", "OpenTick",
           "Rental"]


@dataclass(frozen=True)
class Instance:
    """An instance this agent rented or adopted (the ownership read model)."""

    instance_id: int
    label: str
    idem_key: str | None
    offer_id: int | None
    gpu_name: str | None
    dph: float | None
    rented_seq: int
    status: str  # active | destroyed
    destroyed_seq: int | None = None


@dataclass(frozen=True)
class Intent:
    """A side-effecting tool call; ``result_seq`` None while its outcome is not logged."""

    call_id: str
    idem_key: str | None
    tool: str
    arguments: str  # the call's arguments as the model sent them (JSON text)
    called_seq: int
    result_seq: int | None = None
    ok: bool | None = None


@dataclass(frozen=True)
class Directive:
    """A standing operator directive; ``id`` is the seq of its ``operator.note``."""

    id: int
    text: str
    by: str
    ts: str
    active: bool
    unpinned_seq: int | None = None


@dataclass(frozen=True)
class KnowledgeVersion:
    """One logged version of a knowledge file; ``hash`` None when the file was removed."""

    name: str
    version: int
    hash: str | None
    size: int
    seq: int
    ts: str
    change: str  # added | changed | removed


@dataclass(frozen=True)
class Memory:
    """One entry of the agent's memory (remember / forget)."""

    key: str
    text: str
    seq: int
    ts: str


@dataclass(frozen=True)
class OpenTick:
    """The newest tick that started and has neither completed nor failed."""

    tick: int
    seq: int  # of its tick.started
    ts: str


@dataclass(frozen=True)
class Rental:
    """An instance of ours with the times its rent and its end were logged (``end_ts`` None: live)."""

    instance_id: int
    gpu_name: str | None
    dph: float | None
    label: str
    start_ts: str
    end_ts: str | None = None
    storage_dph: float | None = None  # what its disk bills an hour while it does not run (from its rent's event)


@dataclass(frozen=True)
class FailedRun:
    """The ticks that failed in a row at the end of the log, and the newest failure's reason."""

    count: int
    latest_reason: str | None


@dataclass(frozen=True)
class InstanceState:
    """What vast.ai last reported for an instance, and since when it has reported it."""

    instance_id: int
    status: str
    intended: str | None
    since: float
    seen_seq: int
