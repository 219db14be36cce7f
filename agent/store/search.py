"""Full-text search over the log: what the index holds for each event, and the search itself (each recorder
runs its own query: SQLite's FTS5, with snippets; PostgreSQL's tsvector, with ts_headline)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent import events as ev
from agent.events import Event
from agent.store.chain import row_to_event
from agent.store.db import sqlite3

if TYPE_CHECKING:  # (agent.store.log imports this module)
    from agent.store.log import EventLog

FTS_TOKENIZE = "porter unicode61"  # as schema.sql creates events_fts
WORD = re.compile(r"[^\W_]+")  # a run of letters and digits: one word to the index's tokenizer (unicode61)


def fts_text(text: str, pg: bool) -> str:
    """PostgreSQL text cannot hold NUL; the search text drops it (the payload keeps it, escaped)."""
    return text.replace("\x00", "") if pg and "\x00" in text else text


def snippets(match: str, hits: list[tuple[int, str]]) -> dict[int, str]:
    """seq -> snippet of each of ``hits`` (seq, index text) that matches the FTS5 query ``match``: the same
    FTS5 ``snippet()`` the index gave when it kept the text, run over an in-memory index (detail=full, so
    phrases match in order) of just these texts."""
    mem = sqlite3.connect(":memory:")
    try:
        mem.execute(f"CREATE VIRTUAL TABLE hit USING fts5(text, tokenize = '{FTS_TOKENIZE}')")
        mem.executemany("INSERT INTO hit (rowid, text) VALUES (?,?)", hits)
        rows = mem.execute("SELECT rowid, snippet(hit, 0, '[', ']', ' … ', 24) FROM hit WHERE hit MATCH ?", (match,))
        return {int(seq): str(snip) for seq, snip in rows}
    finally:
        mem.close()


def search_text(r: tuple[Any, ...],
                 render: Callable[[Event], dict[str, Any] | None] | None = None) -> str:
    """What the full-text index holds for the events row ``r`` (``render``: how an Event becomes its
    message, by default ``agent.events.render``)."""
    e = row_to_event(r)
    try:
        msg = (render or ev.render)(e)
    except Exception:  # noqa: BLE001 - a rendering bug must not keep the rest of the log out of the index
        msg = None
    if msg is not None:
        return ev.search_text(e, msg)
    try:
        text = ev.VOCABULARY.search(e)  # what a version that is not model-visible indexes, if it says
    except Exception:  # noqa: BLE001 - as for rendering
        text = None
    return text if text is not None else f"{e.kind} {r[7]}"


def search(log: EventLog, query: str, *, limit: int = 20, until_seq: int | None = None) -> list[tuple[Event, str]]:
    """Full-text search over every event's rendered text, newest first (the index is brought up to
    the head first; a read-only log searches what was indexed)."""
    terms = [t for t in query.replace('"', " ").split() if t]
    words = [w for t in terms for w in WORD.findall(t)]
    if not words:
        return []
    log.index_search()
    return log.recorder.search(terms, words, query, limit=limit, until_seq=until_seq)
