"""The load step: read a projection's inputs from the event log, then build.

Everything the projection reads goes through ``EventLog``'s read API: the newest
``context.compacted`` and ``context.calibrated`` (through the kind index) and the
events after the compaction. The cost does not grow with the length of the log.
"""

from __future__ import annotations

from typing import Any

from agent import logsetup
from agent.config import ContextSettings
from agent.context.build import Inputs, Projection, build, settings_from_manifest
from agent.context.cache import Meter, ProjectionCache
from agent.context.calibration import Calibration, next_ratio
from agent.context.inputs import manifest_of, recorded
from agent.context.prompts import Prompts
from agent.errors import UsageError
from agent.events import Event
from agent.store.log import EventLog
from agent.tokens import Tokenizer, encoding_key, get_tokenizer

logger = logsetup.get_logger(__name__)


def tokenizer_for(settings: ContextSettings) -> Tokenizer:
    return get_tokenizer(settings.encoding, settings.encoding_file, settings.encoding_sha256)


def meter_for(settings: ContextSettings, cache: ProjectionCache | None) -> Meter:
    """A meter for ``settings``' encoding through ``cache`` (a fresh one when None). The encoding is loaded
    when the meter first needs it: not at all when the cache holds every count asked for."""
    return (ProjectionCache() if cache is None else cache).meter(
        lambda: tokenizer_for(settings), encoding_key(settings.encoding, settings.encoding_file,
                                                      settings.encoding_sha256))


def _newest(log: EventLog, kind: str, until_seq: int | None) -> Event | None:
    return next(iter(log.read(0, until_seq=until_seq, kinds=[kind], newest_first=True, limit=1)), None)


def load_calibration(log: EventLog, until_seq: int | None, margin: float) -> Calibration:
    e = _newest(log, "context.calibrated", until_seq)
    return Calibration(1.0, margin, None) if e is None else Calibration(float(e.payload["ratio"]), margin, e.seq)


def load(log: EventLog, until_seq: int | None = None) -> Inputs:
    """The inputs of a projection as of ``until_seq`` (None = now)."""
    end = log.last_seq() if until_seq is None else until_seq
    comp = _newest(log, "context.compacted", end)
    covered_to = comp.payload["covered_to"] if comp else 0
    events = list(log.read(covered_to, until_seq=end))
    cal = load_calibration(log, end, 0.0)
    return Inputs(end=end, compaction=comp, events=events, ratio=cal.ratio, ratio_seq=cal.seq)


def project(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
            tools: list[dict[str, Any]], until_seq: int | None = None, model: str = "",
            cache: ProjectionCache | None = None, params: dict[str, Any] | None = None) -> Projection:
    """The request the model sees at ``until_seq`` (None = now), within the budget."""
    return build(load(log, until_seq), prompts=prompts, settings=settings, policy=policy, tools=tools,
                 meter=meter_for(settings, cache), model=model, params=params)


def update_calibration(log: EventLog, estimated: int, reported: int, *, tick: int | None = None) -> Event | None:
    """Fold one provider report into the smoothed ratio; append ``context.calibrated``
    only when the ratio moves by more than 2%. Returns the appended event, if any."""
    if estimated <= 0 or reported <= 0:
        return None
    current = load_calibration(log, None, 0.0)
    new = next_ratio(current, estimated, reported)
    if new is None:
        return None
    logger.info("context.calibrated", ratio=new, previous=current.ratio, estimated=estimated, reported=reported)
    return log.append("context.calibrated", {"ratio": float(new)}, "system", tick)


# ------------------------------------------------------------------ time travel


def not_before_first(log: EventLog, ts: str | None, what: str) -> None:
    """Refuse a time before the log's first event (``what``: how the operator named it, ``--at``): it would
    show an empty history, not an answer."""
    first = next(iter(log.read(0, limit=1)), None)
    if ts is not None and first is not None and ts < first.ts:
        raise UsageError(f"{what} {ts[:19]}Z is before the first event ({first.ts[:19]}Z); the log holds nothing "
                         "then: use a later time ('fleet-agent thread show --limit 1' shows the first event)")


def not_past_the_end(log: EventLog, seq: int | None, what: str) -> None:
    """Refuse a seq the log has not reached (``what``: how the operator named it, ``--seq``)."""
    if seq is not None and seq > (last := log.last_seq()):
        raise UsageError(f"{what} {seq}: the log ends at seq {last}; use a smaller seq")


def seq_at(log: EventLog, at_ts: str) -> int:
    """The last seq with ts <= at_ts (0 when the log had nothing then)."""
    e = next(iter(log.read(0, until_ts=at_ts, newest_first=True, limit=1)), None)
    return e.seq if e else 0


def request_of_tick(log: EventLog, tick: int) -> Event:
    e = next(iter(log.read(0, kinds=["model.request"], tick=tick, newest_first=True, limit=1)), None)
    if e is None:
        raise UsageError(f"tick {tick} sent no model request; 'fleet-agent thread show --kind model.request --tail 5' lists the newest requests and their ticks; or use --seq / --at")
    return e


def project_at(log: EventLog, prompts: Prompts, settings: ContextSettings, *, policy: dict[str, Any],
               tools: list[dict[str, Any]], model: str = "", at_ts: str | None = None, tick: int | None = None,
               seq: int | None = None, cache: ProjectionCache | None = None) -> Projection:
    """Time travel: the request as of a time, a tick's last request, or a seq."""
    if sum(x is not None for x in (at_ts, tick, seq)) > 1:
        raise UsageError("give at most one of --at, --tick, --seq")
    until: int | None = None
    params: dict[str, Any] | None = None
    if at_ts is not None:
        until = seq_at(log, at_ts)
    elif tick is not None:
        req = request_of_tick(log, tick)
        texts = recorded(log, req.seq)
        manifest = manifest_of(req, texts)
        until = int(manifest["thread_to"])
        model = manifest.get("model", model)
        settings = settings_from_manifest(settings, manifest)
        params = texts.get(manifest["params_hash"]) if "params_hash" in manifest else None
    elif seq is not None:
        until = seq
    return project(log, prompts, settings, policy=policy, tools=tools, until_seq=until, model=model, cache=cache,
                   params=params)

