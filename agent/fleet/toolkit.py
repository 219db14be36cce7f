"""What a tool is, what it may use and what it returns; how the runtime finds the tools.

Two kinds of tool. A ``Tool`` reads (the market, the log, the queue) or writes
only to the log: its handler gets the tick's context and the validated
arguments. An ``Action`` changes the fleet and may spend money: it declares a
``check`` next to its handler; the check returns either a policy ``Block`` or
the value the handler needs (the offer found, the instance id), and the handler
gets that value and the call's idempotency key as parameters. The order they
run in lives in one place, ``agent.fleet.pipeline.run_tool_call``.

Arguments arrive as the raw JSON string the model wrote; ``parse_arguments``
parses and validates them against the tool's spec before anything runs.

The tools themselves live in the ``tools`` package, which builds on this module.
The runtime never imports them: it finds them through the ``fleet_agent.tools``
entry point declared in pyproject.toml (``load_tools``), the way plugins are found.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agent.errors import FleetAgentError

if TYPE_CHECKING:  # what a call uses loads where a call is made: listing the tools (context) makes none
    from agent.clients.demand import DemandClient
    from agent.clients.vast import Instance, Offer, VastClient
    from agent.config import Settings
    from agent.fleet.block import Block
    from agent.fleet.policy import Policy
    from agent.store.log import EventLog

ENTRY_POINT_GROUP = "fleet_agent.tools"

Args = dict[str, Any]
"""A call's arguments: a JSON object, validated against the tool's parameters."""

P = TypeVar("P")


class ToolInputError(FleetAgentError):
    """The model's call cannot run as written; the message is shown to the model."""


class ToolsNotInstalled(FleetAgentError):
    """No tool (or a broken one) is registered under the entry point: the install is stale or partial."""


@dataclass(frozen=True)
class Outcome:
    ok: bool
    output: str = ""
    error: str | None = None
    effect: dict[str, Any] | None = None  # rented / destroyed, for the ownership read model
    blocked: tuple[str, str] | None = None  # (rule, detail) when policy refused the call


@dataclass
class ToolContext:
    """What a handler may use during one tick. ``instances`` is the tick's one
    listing (refreshed after a change), so tools never poll per instance."""

    settings: Settings
    log: EventLog
    vast: VastClient
    demand: DemandClient | None
    policy: Policy
    tick: int | None  # None: an operator's manual action, outside any tick
    instances: list[Instance] = field(default_factory=list)
    clock: Callable[[], float] = time.time
    # This tick's rents that created an instance, by label -> (instance id, $/h): the caps count
    # them directly, whatever the ownership read model made of their ids.
    rented: dict[str, tuple[int, float]] = field(default_factory=dict)
    # Who runs these calls when an operator does (a manual destroy), else None: the model.
    operator: str | None = None
    # The settings as configured; ``settings`` holds them with the operator's overrides applied.
    configured: Settings | None = None
    # Offers this tick's searches returned, by id (priced with the fleet's disk): a rent takes its offer
    # from here instead of searching again, as vast.ai rate-limits each endpoint.
    offers: dict[int, Offer] = field(default_factory=dict)
    # Offer ids the current model step asks to rent: one search re-checks every one not seen yet.
    wanted_offers: set[int] = field(default_factory=set)
    # Jobs/h this tick's rents add: what they take off the gap the tick's observation states (``need``).
    covered: float = 0.0
    # The offers the last search named to cover that gap (ids, cheapest per job first): a rent names the next.
    cover: list[int] = field(default_factory=list)

    def owned_ids(self) -> set[int]:
        return set(self.log.owned_instance_ids())

    def gap_left(self) -> float | None:
        """Jobs/h the fleet is still short this tick: the gap the tick's observation states (``need``, agent/fleet/
        throughput.py) less what this tick's rents add; None without one (no demand reading, or outside a tick)."""
        from agent.fleet.throughput import recent_observations

        if self.tick is None:
            return None
        obs = next(iter(recent_observations(self.log, 1)), None)
        need = (obs or {}).get("need")
        gap = need.get("gap") if isinstance(need, dict) else None
        return None if not isinstance(gap, int | float) else max(0.0, float(gap) - self.covered)

    def next_cover(self) -> int | None:
        """The first offer the last search named to cover the gap that this tick has not rented, while the fleet is
        still short (None: no search named any, each is rented (a rent takes its offer out of ``offers``), or this
        tick's rents, of those offers or others, have covered the gap)."""
        if not (self.gap_left() or 0.0) > 0:
            return None
        return next((oid for oid in self.cover if oid in self.offers), None)

    def known_to_log(self, instance_id: int) -> bool:
        """Whether an event of ours rented or adopted this instance (whatever became of it)."""
        return self.log.store.instance(instance_id) is not None

    def ours(self) -> list[Instance]:
        owned = self.owned_ids()
        return [i for i in self.instances if i.id in owned or self.policy.is_our_label(i.label)]

    def refresh(self) -> None:
        self.instances = self.vast.list_instances()


def _spec(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


@dataclass(frozen=True)
class Tool:
    """A call that leaves the fleet as it is: its call is logged, it runs, its result is logged.
    An optional ``check`` may refuse it by policy first (a ``Block``; nothing is sent)."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[[ToolContext, Args], Outcome]
    check: Callable[[ToolContext, Args], Block | None] | None = None
    # A pure read (the queue, the balance, the listing, the market): the same call again within a tick is not
    # run, its answer being in the context already (agent/runtime/tick.py).
    read: bool = False

    def spec(self) -> dict[str, Any]:
        return _spec(self.name, self.description, self.parameters)


@dataclass(frozen=True)
class Action(Generic[P]):
    """A call that changes the fleet. ``check`` runs first: a ``Block`` refuses the call (nothing is
    sent), anything else is the prepared value handed to ``handler`` together with the idempotency
    key under which the intent was logged before the handler runs."""

    name: str
    description: str
    parameters: dict[str, Any]
    check: Callable[[ToolContext, Args], P | Block]
    handler: Callable[[ToolContext, Args, P, str], Outcome]

    def spec(self) -> dict[str, Any]:
        return _spec(self.name, self.description, self.parameters)


AnyTool = Tool | Action[Any]


def obj(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required or [], "additionalProperties": False}


# ------------------------------------------------------------------ argument validation

_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _check_number(schema: dict[str, Any], value: float, where: str) -> None:
    if "minimum" in schema and value < schema["minimum"]:
        raise ToolInputError(f"{where} must be >= {schema['minimum']}, got {value}")
    if "maximum" in schema and value > schema["maximum"]:
        raise ToolInputError(f"{where} must be <= {schema['maximum']}, got {value}")


def _check_string(schema: dict[str, Any], value: str, where: str) -> None:
    if len(value) < schema.get("minLength", 0):
        raise ToolInputError(f"{where} must not be empty")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        raise ToolInputError(f"{where} is longer than {schema['maxLength']} characters")


def _check_array(schema: dict[str, Any], value: list[Any], where: str) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        raise ToolInputError(f"{where} has more than {schema['maxItems']} items")
    for i, item in enumerate(value):
        validate(schema.get("items", {}), item, f"{where}[{i}]")


def _check_object(schema: dict[str, Any], value: dict[str, Any], where: str) -> None:
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


_BY_TYPE: dict[str, Callable[[dict[str, Any], Any, str], None]] = {
    "integer": _check_number, "number": _check_number, "string": _check_string,
    "array": _check_array, "object": _check_object,
}


def validate(schema: dict[str, Any], value: Any, where: str = "arguments") -> None:
    """The subset of JSON Schema our specs use: type, properties, required,
    additionalProperties, enum, minimum, maximum, minLength, maxLength, items, maxItems."""
    t = schema.get("type")
    if t and not _TYPES[t](value):
        raise ToolInputError(f"{where} must be of type {t}, got {type(value).__name__}")
    if "enum" in schema and value not in schema["enum"]:
        raise ToolInputError(f"{where} must be one of {schema['enum']}, got {value!r}")
    check = _BY_TYPE.get(t) if t else None
    if check is not None:
        check(schema, value, where)


def parse_arguments(tool: AnyTool, raw: str) -> Args:
    try:
        args = json.loads(raw) if raw.strip() else {}
    except (json.JSONDecodeError, AttributeError) as e:
        raise ToolInputError(f"arguments are not valid JSON ({e}); send a JSON object") from None
    if not isinstance(args, dict):
        raise ToolInputError("arguments must be a JSON object")
    validate(tool.parameters, args)
    return args


# ------------------------------------------------------------------ finding the tools


@dataclass(frozen=True)
class Toolbox:
    """The tools of one run, by name; iterated and specified in name order (cache-friendly)."""

    by_name: Mapping[str, AnyTool]

    @classmethod
    def of(cls, tools: Iterable[AnyTool]) -> Toolbox:
        by_name: dict[str, AnyTool] = {}
        for t in tools:
            if not isinstance(t, Tool | Action):
                raise ToolsNotInstalled(f"{t!r} is not a tool (agent.fleet.toolkit.Tool or Action)")
            if t.name in by_name:
                raise ToolsNotInstalled(f"two tools are named {t.name!r}")
            by_name[t.name] = t
        return cls(dict(sorted(by_name.items())))

    def get(self, name: str) -> AnyTool:
        try:
            return self.by_name[name]
        except KeyError:
            raise ToolInputError(f"unknown tool {name!r}; available: {', '.join(self.by_name)}") from None

    def __iter__(self) -> Iterator[AnyTool]:
        return iter(self.by_name.values())

    def specs(self) -> list[dict[str, Any]]:
        """The specs sent with every model request, in a stable order."""
        return [t.spec() for t in self]


_FOUND: list[Toolbox] = []  # the tools found, once a process: what is installed does not change while it runs


def load_tools() -> Toolbox:
    """Every tool registered under the ``fleet_agent.tools`` entry point (pyproject.toml).

    Each entry point names a sequence of tools (``tools:TOOLS``). None found means the
    package metadata does not declare them: an install from before the entry point, or a
    partial one. That is an error, never an agent without tools. The entry points are read
    once a process (reading every installed package's metadata costs a tick ~20 ms)."""
    if not _FOUND:
        _FOUND.append(_find_tools())
    return _FOUND[0]


def _find_tools() -> Toolbox:
    found: list[AnyTool] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found.extend(ep.load())
        except (ImportError, AttributeError, TypeError) as e:
            raise ToolsNotInstalled(f"the tools entry point {ep.name} = {ep.value!r} does not load ({e}); "
                                    "reinstall fleet-agent (pip install -e . in a checkout)") from e
    if not found:
        raise ToolsNotInstalled(f"no tools are registered under the {ENTRY_POINT_GROUP!r} entry point: the "
                                "installed package metadata is stale; reinstall fleet-agent "
                                "(pip install -e . in a checkout)")
    return Toolbox.of(found)
