"""The log as data: events as JSON lines or Parquet, and model decisions as fine-tuning examples.

``export_events`` writes every field of each selected event (hashes included) as JSON lines, or as a
Parquet table (pyarrow, the optional ``parquet`` extra) whose ``payload`` column holds the canonical JSON.

``training_examples`` turns each answered model request into one example in the OpenAI fine-tuning chat
format: ``messages`` (the request exactly as the model saw it, re-derived from the log and checked against
its recorded hash, then the model's answer), ``tools`` (the schemas in force then) and
``parallel_tool_calls``. Only the last assistant message (the answer the example is about) has weight 1;
earlier answers in the context have weight 0, so no answer is learned twice and an overridden one is not
learned from a later example's context either.

An answer counts as *overridden* when an operator marked it so with ``fleet-agent override SEQ``
(a ``response.overridden`` event naming the ``model.response``): its example is left out. An answer with a
call policy refused gets weight 0 (it stays as context, never as a lesson). Each example holds only the
format's own keys, so the file validates against the fine-tuning schema as written; what fleet-agent knows
about it (the request and response seqs, tick, request hash, model, and the refused calls: call id, tool,
rule, detail) goes to a side file, one JSON line per example in the same order (``line`` numbers the
example). Requests whose re-derived hash differs from the recorded one are skipped and counted (run
``fleet-agent replay --verify`` to see why): an example is only ever what the model really saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agent.config import ContextSettings
from agent.context import ProjectionCache
from agent.context.inputs import manifest_of, recorded
from agent.context.prompts import Prompts
from agent.context.replay import rederive
from agent.errors import FleetAgentError, UsageError
from agent.events import Event, render, stored_payload
from agent.events.canonical import canonical
from agent.store.log import EventLog

FORMATS = ("jsonl", "parquet")
PARQUET_BATCH = 5000


class ExportError(FleetAgentError):
    """An export that cannot be written as asked (nothing is left half-written)."""


@dataclass(frozen=True)
class Selection:
    """Which events: kinds (exact, or a family such as ``tool.``), after a seq, at or after a time."""

    kinds: tuple[str, ...] = ()
    since_seq: int = 0
    since_ts: str | None = None

    def wants(self, kind: str) -> bool:
        return not self.kinds or any(kind == k or kind.startswith(k.rstrip(".*") + ".") for k in self.kinds)


def select(log: EventLog, sel: Selection) -> Iterator[Event]:
    for e in log.read(sel.since_seq, since_ts=sel.since_ts):
        if sel.wants(e.kind):
            yield e


def write_jsonl(events: Iterable[Event], out: IO[str]) -> int:
    """Every field of each event, one JSON object a line (payloads as objects, as the row holds them: the
    form the hash covers)."""
    n = 0
    for e in events:
        out.write(json.dumps({**e.to_dict(), "payload": stored_payload(e)}, ensure_ascii=False, sort_keys=True) + "\n")
        n += 1
    return n


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ExportError("--format parquet needs pyarrow, which is not installed; install the extra "
                          "(pip install 'fleet-agent[parquet]') or use --format jsonl") from None
    return pyarrow


def _schema(pa: Any) -> Any:
    return pa.schema([("seq", pa.int64()), ("id", pa.string()), ("ts", pa.string()), ("kind", pa.string()),
                      ("version", pa.int32()), ("source", pa.string()), ("tick", pa.int64()),
                      ("payload", pa.string()), ("tokens", pa.int64()), ("prev_hash", pa.string()),
                      ("hash", pa.string())])


def write_parquet(events: Iterable[Event], path: Path) -> int:
    """The events as one Parquet table (payload as canonical JSON text), written in batches."""
    pa = _pyarrow()
    schema = _schema(pa)
    n = 0
    with pa.parquet.ParquetWriter(str(path), schema) as writer:
        batch: list[dict[str, Any]] = []
        for e in events:
            row = e.to_dict()
            row["payload"] = canonical(stored_payload(e))
            batch.append(row)
            if len(batch) >= PARQUET_BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                n, batch = n + len(batch), []
        if batch or n == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n


@contextmanager
def atomic_file(path: Path, *, binary: bool = False) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed over it only when the block succeeds."""
    path = path.resolve()
    if path.is_dir():
        raise ExportError(f"-o {path} is a directory; name a file to write")
    if not path.parent.is_dir():
        raise ExportError(f"-o {path}: the directory {path.parent} does not exist; create it or write elsewhere")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def export_events(log: EventLog, sel: Selection, fmt: str, output: Path | None, stdout: IO[str]) -> int:
    """Write the selected events in ``fmt`` to ``output`` (atomically) or, for jsonl, to ``stdout``."""
    if fmt not in FORMATS:
        raise UsageError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        if output is None:
            raise UsageError("--format parquet writes a file: add -o FILE.parquet")
        _pyarrow()
        with atomic_file(output) as tmp:
            return write_parquet(select(log, sel), tmp)
    if output is None:
        return write_jsonl(select(log, sel), stdout)
    with atomic_file(output) as tmp, open(tmp, "w", encoding="utf-8") as f:
        return write_jsonl(select(log, sel), f)


# ------------------------------------------------------------------ training


@dataclass
class TrainingReport:
    written: int = 0
    overridden: int = 0
    with_blocked: int = 0
    unreproducible: list[int] = field(default_factory=list)   # request seqs whose hash did not re-derive
    unanswered: int = 0


def overridden_responses(log: EventLog) -> set[int]:
    return {int(e.payload["response_seq"]) for e in log.read(0, kinds=["response.overridden"])}


def _blocked_by_call(log: EventLog, sel: Selection) -> dict[str, dict[str, Any]]:
    return {e.payload["call_id"]: {"call_id": e.payload["call_id"], "name": e.payload["name"],
                                   "rule": e.payload["rule"], "detail": e.payload.get("detail")}
            for e in log.read(sel.since_seq, since_ts=sel.since_ts, kinds=["policy.blocked"])}


def _weighted(messages: list[dict[str, Any]], answer: dict[str, Any], weight: int) -> list[dict[str, Any]]:
    out = [({**m, "weight": 0} if m.get("role") == "assistant" else dict(m)) for m in messages]
    out.append({**answer, "weight": weight})
    return out


@dataclass(frozen=True)
class Inputs:
    """What re-deriving a request needs besides the log: today's inputs, used where the log lacks them."""

    prompts: Prompts
    settings: ContextSettings
    policy: dict[str, Any]
    tools: list[dict[str, Any]]
    model: str


def training_examples(log: EventLog, inputs: Inputs, report: TrainingReport, *, sel: Selection = Selection(),
                      cache: ProjectionCache | None = None) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(example, its metadata) per answered model request (see the module docstring)."""
    cache = cache or ProjectionCache()
    texts = recorded(log)
    skip = overridden_responses(log)
    blocked = _blocked_by_call(log, sel)
    for resp in log.read(sel.since_seq, since_ts=sel.since_ts, kinds=["model.response"]):
        req = log.get(int(resp.payload.get("request_seq") or 0))
        if req is None or req.kind != "model.request":
            report.unanswered += 1
            continue
        if resp.seq in skip:
            report.overridden += 1
            continue
        got = _example(log, req, resp, inputs, texts, cache, blocked)
        if got is None:
            report.unreproducible.append(req.seq)
            continue
        report.written += 1
        report.with_blocked += bool(got[1]["policy_blocked"])
        yield got


def _example(log: EventLog, req: Event, resp: Event, inputs: Inputs, texts: dict[str, Any],
             cache: ProjectionCache, blocked: dict[str, dict[str, Any]]
             ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    manifest = manifest_of(req, texts)
    then, p = rederive(log, req, texts, inputs.prompts, inputs.settings, policy=inputs.policy, tools=inputs.tools,
                       model=inputs.model, cache=cache)
    if p.request_hash != req.payload["request_hash"]:
        return None
    answer = render(resp)
    assert answer is not None  # model.response is model-visible in every version
    refused = [blocked[c["id"]] for c in resp.payload.get("tool_calls") or [] if c["id"] in blocked]
    ex: dict[str, Any] = {"messages": _weighted(p.messages, answer, 0 if refused else 1),
                          "tools": then.tools, "parallel_tool_calls": True}
    meta = {"request_seq": req.seq, "response_seq": resp.seq, "tick": resp.tick,
            "request_hash": req.payload["request_hash"], "model": manifest.get("model"), "policy_blocked": refused}
    return ex, meta


def write_training(examples: Iterable[tuple[dict[str, Any], dict[str, Any]]], out: IO[str],
                   meta_out: IO[str] | None) -> None:
    for n, (ex, meta) in enumerate(examples, 1):
        out.write(json.dumps(ex, ensure_ascii=False, sort_keys=True) + "\n")
        if meta_out is not None:
            meta_out.write(json.dumps({"line": n, **meta}, ensure_ascii=False, sort_keys=True) + "\n")


def metadata_path(output: Path) -> Path:
    """The side file beside ``train.jsonl``: ``train.metadata.jsonl``."""
    return output.with_name(f"{output.stem}.metadata{output.suffix or '.jsonl'}")


def export_training(log: EventLog, inputs: Inputs, output: Path | None, stdout: IO[str], *,
                    sel: Selection = Selection(), metadata: Path | None = None,
                    cache: ProjectionCache | None = None) -> TrainingReport:
    """Write the examples to ``output`` (stdout when None) and, when ``metadata`` names a file, their
    metadata there; each file is replaced only when complete."""
    report = TrainingReport()

    with contextlib.ExitStack() as stack:
        def opened(path: Path) -> IO[str]:
            tmp = stack.enter_context(atomic_file(path))
            return stack.enter_context(open(tmp, "w", encoding="utf-8"))

        out = stdout if output is None else opened(output)
        meta_out = None if metadata is None else opened(metadata)
        write_training(training_examples(log, inputs, report, sel=sel, cache=cache), out, meta_out)
    return report


def mark_overridden(log: EventLog, response_seq: int, by: str, note: str | None) -> Event:
    """Record that an operator overrode model answer ``response_seq`` (refused unless it is one, and once)."""
    from agent.feedback.notes import MAX_NOTE_CHARS, operator_name, utf8_text

    by = operator_name(by)
    note = utf8_text("--note", note.strip()) if note else None
    if note is not None and len(note) > MAX_NOTE_CHARS:
        raise UsageError(f"the note is {len(note)} characters; the limit is {MAX_NOTE_CHARS}")
    with log.transaction() as tx:
        e = tx.log.get(response_seq)
        if e is None or e.kind != "model.response":
            what = "nothing" if e is None else f"a {e.kind}"
            raise UsageError(f"event #{response_seq} is {what}, not a model answer; find answers with "
                             "'fleet-agent thread show --kind model.response'")
        if response_seq in overridden_responses(tx.log):
            raise UsageError(f"model answer #{response_seq} is already marked overridden")
        payload: dict[str, Any] = {"response_seq": response_seq, "by": by}
        if note:
            payload["note"] = note
        return tx.append("response.overridden", payload, "operator")
