"""Kinds of the daemon and its configuration: start, stop, loads, refusals and what changed."""

from __future__ import annotations

from dataclasses import dataclass

from agent.events.event import Event, JsonArray, JsonObject, Message
from agent.events.kinds.base import VOCABULARY, same_shape
from agent.events.payload import Payload
from agent.events.rendering import inline, user
from agent.events.vocabulary import Version

_define = VOCABULARY.define


# ---------------------------------------------------------------- daemon and configuration


@dataclass(frozen=True, kw_only=True)
class DaemonStartedV1(Payload):
    version: str
    config_hash: str
    prompt_hashes: JsonObject
    pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class DaemonStoppedV1(Payload):
    reason: str


@dataclass(frozen=True, kw_only=True)
class ConfigLoadedV1(Payload):
    config_hash: str
    changed: JsonArray | None = None
    path: str | None = None


@dataclass(frozen=True, kw_only=True)
class ConfigRefusedV1(Payload):
    error: str
    kept_config_hash: str
    path: str | None = None


_define("daemon.started", "The daemon started.", Version(1, DaemonStartedV1))
_define("daemon.stopped", "The daemon stopped.", Version(1, DaemonStoppedV1))
_define("config.loaded", "A configuration was loaded (start or SIGHUP).", Version(1, ConfigLoadedV1))
_define("config.refused", "A reload (SIGHUP) was refused; the previous configuration stays in force.",
        Version(1, ConfigRefusedV1))



# ---------------------------------------------------------------- config audit


@dataclass(frozen=True, kw_only=True)
class ConfigChangedV1(Payload):
    config_hash: str
    previous_hash: str
    changes: JsonArray  # [{key, old, new}], secrets never among them (the file holds none)
    path: str | None = None
    settings: JsonObject | None = None  # every dotted key now in force ('fleet-agent config diff' reads it)


def _config_value(v: object) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(inline(x) for x in v) + "]"
    if v is None:
        return "unset"
    return inline(v)


def _r_changed_v2(e: Event, p: ConfigChangedV1) -> Message | None:
    """One ``[config change · key old → new]`` line per changed key, as every other operator input is
    tagged; nothing when no key changed."""
    lines = [f"[config change · {inline(c.get('key'))} {_config_value(c.get('old'))} → {_config_value(c.get('new'))}]"
             for c in p.changes if isinstance(c, dict)]
    return user("\n".join(lines)) if lines else None


@dataclass(frozen=True, kw_only=True)
class ConfigAppliedV1(Payload):
    config_hash: str
    settings: JsonObject  # every dotted key in force (no secrets: the file names where keys come from)
    path: str | None = None


_define("config.changed", "A reload (SIGHUP) put a new configuration in force: old -> new for each changed key.",
        Version(1, ConfigChangedV1), Version(2, ConfigChangedV1, _r_changed_v2, upcast=same_shape))
_define("config.applied", "The daemon started with this effective configuration (every non-secret setting).",
        Version(1, ConfigAppliedV1))
