"""Full-text search over the log: what the index holds for each event, bringing it up to the head, and the
queries (SQLite's FTS5, with snippets; PostgreSQL's tsvector, with ts_headline)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agent import events as ev
from agent.errors import LogError
from agent.events import Event
from agent.store.chain import COLS, row_to_event
from agent.store.db import db_errors, sqlite3

if TYPE_CHECKING:  # (agent.store.log imports this module)
    from agent.store.log import EventLog

INSERT_FTS = "INSERT INTO events_fts (rowid, text) VALUES (?,?)"
FTS_TOKENIZE = "porter unicode61"  # as schema.sql creates events_fts
WORD = re.compile(r"[^\W_]+")  # a run of letters and digits: one word to the index's tokenizer (unicode61)
FTS_HEAD_SQL = "SELECT rowid FROM events_fts ORDER BY rowid DESC LIMIT 1"
FTS_HEAD_SQL_PG = "SELECT seq FROM events_fts ORDER BY seq DESC LIMIT 1"
INSERT_FTS_PG = "INSERT INTO events_fts (seq, text, kind) VALUES (?,?,?)"


def fts_text(text: str, pg: bool) -> str:
    """PostgreSQL text cannot hold NUL; the search text drops it (the payload keeps it, escaped)."""
    return text.replace("\x00", "") if pg and "\x00" in text else text


def index_from(conn: Any, done: int, head: int, *, pg: bool = False,
                render: Callable[[Event], dict[str, Any] | None] | None = None) -> int:
    """Index the events after seq ``done`` up to ``head``, 1,000 rows a statement; how many. SQLite's
    index keeps no copy of the text (content=''): ``search`` renders the hits it shows again. PostgreSQL's
    keeps the text, for ``ts_headline``."""
    n = 0
    while done < head:
        rows = conn.execute(f"SELECT {COLS} FROM events WHERE seq > ? ORDER BY seq LIMIT 1000", (done,)).fetchall()
        if not rows:
            break
        if pg:
            conn.executemany(INSERT_FTS_PG, [(r[0], fts_text(search_text(r, render), True), r[3])
                                              for r in rows])
        else:
            conn.executemany(INSERT_FTS, [(r[0], search_text(r, render)) for r in rows])
        done, n = rows[-1][0], n + len(rows)
    return n


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
    if log.is_pg:
        return _search_pg(log, " ".join(terms), limit, until_seq)
    match = " ".join(f'"{t}"' for t in terms)  # each term a phrase: "destroy_instance" is two words in a row
    loose = " ".join(f'"{w}"' for w in words)  # the index (detail=none) knows words, not their order
    out: list[tuple[Event, str]] = []
    below = until_seq
    while len(out) < limit:
        batch = _candidates(log, query, loose, below, max(limit, 50))
        texts = [(r[0], search_text(r)) for r in batch]
        snips = snippets(match, texts)  # the events that match the query itself, with their snippets
        out += [(row_to_event(r), snips[r[0]]) for r in batch if r[0] in snips]
        if len(batch) < max(limit, 50):
            break
        below = batch[-1][0] - 1
    return out[:limit]

def _candidates(log: EventLog, query: str, loose: str, below: int | None, n: int) -> list[tuple[Any, ...]]:
    """The newest ``n`` events (seq <= ``below``) holding every word of the query, newest first."""
    sql = ("SELECT rowid FROM events_fts WHERE events_fts MATCH ?"
           + (" AND rowid <= ?" if below is not None else "") + " ORDER BY rowid DESC LIMIT ?")
    params: list[Any] = [loose] + ([below] if below is not None else []) + [n]
    try:
        seqs = [r[0] for r in log.conn.execute(sql, params).fetchall()]
    except sqlite3.OperationalError as e:
        raise LogError(f"search query {query!r} could not run: {e}") from e
    rows = [log._row_at(log.conn, seq) for seq in seqs]  # an archived event from its segment
    return [r for r in rows if r is not None]

def _search_pg(log: EventLog, text: str, limit: int, until_seq: int | None) -> list[tuple[Event, str]]:
    """``search`` on PostgreSQL: every term must match (tsvector, GIN index), with the same snippet marks."""
    sql = ("SELECT seq, ts_headline('english', text, q, 'StartSel=[, StopSel=], MaxWords=24, MinWords=8,"
           " MaxFragments=2, FragmentDelimiter=\" … \"') FROM events_fts, plainto_tsquery('english', ?) q"
           " WHERE tsv @@ q" + (" AND seq <= ?" if until_seq is not None else "") + " ORDER BY seq DESC LIMIT ?")
    params: list[Any] = [text] + ([until_seq] if until_seq is not None else []) + [limit]
    try:
        rows = log.conn.execute(sql, params).fetchall()
    except db_errors() as e:
        raise LogError(f"search query {text!r} could not run: {e}") from e
    return [(hit, snip) for seq, snip in rows if (hit := log.get(seq)) is not None]
