"""Tool specs (JSON Schema) and dispatch with argument validation.

A tool is a spec plus a handler. Arguments arrive as the raw JSON string the
model wrote; they are parsed and validated against the spec before anything
runs. Unparseable JSON, an unknown tool, a missing or mistyped argument: the
model gets an error result and nothing is called.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agent.errors import FleetAgentError


class ToolInputError(FleetAgentError):
    """The model's call cannot run as written; the message is shown to the model."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    output: str = ""
    error: str | None = None
    effect: dict[str, Any] | None = None  # rented / destroyed, for the ownership read model
    blocked: tuple[str, str] | None = None  # (rule, detail) when policy refused the call


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[Any, dict[str, Any]], Outcome]
    side_effect: bool = False  # changes the fleet: intent logged first, idempotency key, policy
    tags: tuple[str, ...] = field(default_factory=tuple)

    def spec(self) -> dict[str, Any]:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}


_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def validate(schema: dict[str, Any], value: Any, where: str = "arguments") -> None:
    """The subset of JSON Schema our specs use: type, properties, required,
    additionalProperties, enum, minimum, maximum, minLength, maxLength, items, maxItems."""
    t = schema.get("type")
    if t and not _TYPES[t](value):
        raise ToolInputError(f"{where} must be of type {t}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise ToolInputError(f"{where} must be one of {schema['enum']}, got {value!r}")
    if t in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            raise ToolInputError(f"{where} must be >= {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise ToolInputError(f"{where} must be <= {schema['maximum']}, got {value}")
    if t == "string":
        if len(value) < schema.get("minLength", 0):
            raise ToolInputError(f"{where} must not be empty")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            raise ToolInputError(f"{where} is longer than {schema['maxLength']} characters")
    if t == "array":
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise ToolInputError(f"{where} has more than {schema['maxItems']} items")
        for i, item in enumerate(value):
            validate(schema.get("items", {}), item, f"{where}[{i}]")
    if t == "object":
        props = schema.get("properties", {})
        for req in schema.get("required", []):
            if req not in value:
                raise ToolInputError(f"{where}: missing required argument {req!r}")
        for k, v in value.items():
            if k not in props:
                if schema.get("additionalProperties", True) is False:
                    raise ToolInputError(f"{where}: unknown argument {k!r}; allowed: {', '.join(sorted(props))}")
                continue
            validate(props[k], v, f"{k}")


def parse_arguments(tool: Tool, raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, AttributeError) as e:
        raise ToolInputError(f"arguments are not valid JSON ({e}); send a JSON object") from None
    if not isinstance(args, dict):
        raise ToolInputError("arguments must be a JSON object")
    validate(tool.parameters, args)
    return args


_REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    _REGISTRY[tool.name] = tool
    return tool


def _load() -> None:
    # Importing the tool modules registers their tools.
    import tools.fleet  # noqa: F401
    import tools.memory  # noqa: F401


def get(name: str) -> Tool:
    _load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ToolInputError(f"unknown tool {name!r}; available: {', '.join(sorted(_REGISTRY))}") from None


def all_tools() -> list[Tool]:
    _load()
    return [_REGISTRY[n] for n in sorted(_REGISTRY)]


def tool_specs() -> list[dict[str, Any]]:
    """The specs sent with every model request, in a stable order (cache-friendly)."""
    return [t.spec() for t in all_tools()]


@dataclass
class ToolContext:
    """What a handler may use during one tick. ``instances`` is the tick's one
    listing (refreshed after a change), so tools never poll per instance."""

    settings: Any
    log: Any
    vast: Any
    demand: Any
    policy: Any
    tick: int
    instances: list[Any] = field(default_factory=list)
    idem_key: str | None = None
    call_id: str = ""
    clock: Callable[[], float] = time.time

    def owned_ids(self) -> set[int]:
        return {r[0] for r in self.log.conn.execute("SELECT instance_id FROM instances WHERE status = 'active'")}

    def ours(self) -> list[Any]:
        owned = self.owned_ids()
        return [i for i in self.instances if i.id in owned or self.policy.is_our_label(i.label)]

    def refresh(self) -> None:
        self.instances = self.vast.list_instances()
