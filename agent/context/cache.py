"""The projection's memo: token counts, truncations and rendered thread messages.

A ``ProjectionCache`` is an object its owner keeps (the app keeps one for the
life of the process) and passes to every projection; nothing is cached at
module level. Each table is an LRU bounded by entries and by the bytes it keeps alive (texts; for
rendered rows also their decoded payloads). A hit always returns exactly
what computing afresh would, so a cache only changes how fast a request is
built, never its bytes.
"""

from __future__ import annotations

import copy
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, cast

from agent.events import Event, render
from agent.store.log import canonical
from agent.tokens import Tokenizer, message_tokens, text_message_tokens, tools_json

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
V = TypeVar("V")

COUNT_ENTRIES = 1024     # texts whose token count is kept
CUT_ENTRIES = 1024       # (text, cap) truncations kept
ENCODED_ENTRIES = 16     # canonical JSON of a request's text messages (system, pinned, summary) kept
RENDER_ENTRIES = 1024    # rendered thread messages kept (a thread is a few hundred at most)
# Bounds by size as well: one 5 MB tool output must not pin 1,024 times its size (texts are keys).
COUNT_BYTES = 8 << 20
CUT_BYTES = 8 << 20
RENDER_BYTES = 4 << 20
THREAD_PASSES = 2        # passes over a thread kept: the tick's projection's and a compaction's masked view   # counted as what the entries keep alive: decoded payloads and rendered messages

Message = dict[str, Any]
_Fields = tuple[str, int | None, str, dict[str, Any]]


class LRU(Generic[K, V]):
    """A thread-safe map holding at most ``max_entries`` items and ``max_bytes`` of them as ``size``
    measures each (key and value), dropping the least recently used. An item bigger than
    ``max_bytes`` on its own is not kept. Each item remembers the ``epoch`` it was last used in;
    ``sweep(oldest)`` drops those not used since ``oldest``."""

    def __init__(self, max_entries: int, max_bytes: int | None = None,
                 size: Callable[[K, V], int] | None = None) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._size = size or (lambda _k, _v: 0)
        self._items: OrderedDict[K, tuple[V, int, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.epoch = 0

    def get(self, key: K) -> V | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            if hit[2] != self.epoch:
                self._items[key] = (hit[0], hit[1], self.epoch)
            return hit[0]

    def put(self, key: K, value: V) -> None:
        n = self._size(key, value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if self.max_bytes is not None and n > self.max_bytes:
                return
            self._items[key] = (value, n, self.epoch)
            self.bytes += n
            while len(self._items) > self.max_entries or (self.max_bytes is not None and self.bytes > self.max_bytes):
                _, (_, dropped, _) = self._items.popitem(last=False)
                self.bytes -= dropped

    def sweep(self, oldest: int) -> None:
        """Drop the items last used before epoch ``oldest`` (the least recently used come first)."""
        with self._lock:
            while self._items:
                key, (_, n, used) = next(iter(self._items.items()))
                if used >= oldest:
                    return
                del self._items[key]
                self.bytes -= n

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)


def _text_bytes(key: tuple[Any, ...], value: Any) -> int:
    """What an entry keeps alive, about: the texts in its key and value (a str costs ~its length)."""
    n = 64
    for part in (*key, *(value if isinstance(value, tuple) else (value,))):
        if isinstance(part, str):
            n += len(part)
    return n


_SIZE = sys.getsizeof
_LEAVES = frozenset({str, int, float, bool, type(None)})   # no items of their own: their size is all they keep


def _kept(obj: Any) -> int:
    """Bytes ``obj`` keeps alive as the interpreter counts them (``sys.getsizeof``), through the dicts,
    lists and tuples of a decoded JSON payload or a message; shared small objects are counted each time.
    (A JSON leaf is sized without a call of its own: a payload holds hundreds of them.)"""
    n = _SIZE(obj)
    if isinstance(obj, dict):
        for k, v in obj.items():
            n += (_SIZE(k) if type(k) in _LEAVES else _kept(k)) + (_SIZE(v) if type(v) in _LEAVES else _kept(v))
    elif isinstance(obj, list | tuple):
        for v in obj:
            n += _SIZE(v) if type(v) in _LEAVES else _kept(v)
    return n


class _Rendered:
    """A rendered row: the fields a hit must match, its message, and the message's tokens once counted
    (with the key of the encoding that counted them)."""

    __slots__ = ("fields", "message", "tokens")

    def __init__(self, fields: _Fields, message: Message | None) -> None:
        self.fields = fields
        self.message = message
        self.tokens: tuple[int, int] | None = None


def _message_bytes(key: tuple[Any, ...], value: _Rendered) -> int:
    """A rendered row: the fields compared on a hit (its decoded payload above all) and its message."""
    return 64 + _kept((value.fields, value.message))


class ProjectionCache:
    """Memo tables shared by successive projections; bounded by entries and by bytes, and holding only
    what the last ``KEEP_PROJECTIONS`` projections used: each ``meter()`` starts a projection, and
    an entry none of the last ones used (a row compacted out of the thread, an observation no longer
    shown) is dropped then, so the tables stay the size of what the model is shown rather than filling
    to their bounds over hundreds of ticks (bench/rss.py)."""

    KEEP_PROJECTIONS = 32

    def __init__(self, *, counts: int = COUNT_ENTRIES, cuts: int = CUT_ENTRIES, rendered: int = RENDER_ENTRIES,
                 max_bytes: tuple[int, int, int] = (COUNT_BYTES, CUT_BYTES, RENDER_BYTES)) -> None:
        self.counts: LRU[tuple[int, str], int] = LRU(counts, max_bytes[0], _text_bytes)
        self.cuts: LRU[tuple[int, str, int], tuple[str, int, int]] = LRU(cuts, max_bytes[1], _text_bytes)
        self.rendered: LRU[tuple[int, str], _Rendered] = LRU(rendered, max_bytes[2], _message_bytes)
        self.encoded: LRU[tuple[str, str], str] = LRU(ENCODED_ENTRIES, max_bytes[1], _text_bytes)
        self._encodings: dict[int, Any] = {}   # keeps each keyed encoding alive, so its id stays unique
        # The inputs the last projection loaded, as (log, log.others_version() then, Inputs): the next one
        # extends them with what was appended since (agent.context.load.load) instead of reading them again.
        self.loaded: Any = None
        # The passes over the thread the last projections made (agent.context.thread.build_thread), by what
        # they depend on besides the events: the next projection feeds them only the events appended since.
        self._threads: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._threads_lock = threading.Lock()
        # The canonical JSON of the last request's messages and the sha256 state after each
        # (agent.context.build._hashed_messages): the next request hashes only what it adds.
        self.hashed: tuple[list[str], list[Any]] | None = None
        # What the projection derives from its other inputs (the tools' encodings, the system prompt), by
        # name: (the objects it was derived from, a copy of them then, the value).
        self._derived: dict[str, tuple[tuple[Any, ...], Any, Any]] = {}
        self._checked: list[tuple[Any, Any]] = []   # (object, its kept copy) found equal since the last meter()
        self._stable: dict[str, Any] = {}

    def stable(self, name: str, value: T) -> T:
        """``value``, or the value kept under ``name`` when it is equal: a caller that makes its tools or
        policy afresh for every tick hands the projection the very same object each time, so what
        ``derived`` keeps for it holds from one tick to the next."""
        kept: T | None = self._stable.get(name)
        if kept is not None and type(kept) is type(value) and kept == value:
            return kept
        self._stable[name] = value
        return value

    def derived(self, name: str, of: tuple[Any, ...], make: Callable[[], T]) -> T:
        """``make()``, a function of the objects ``of`` alone, remembered under ``name`` while it is asked for
        the very same objects, unchanged since (compared with a copy taken when it was made). Within one
        projection (between two ``meter()`` calls) an object found unchanged is not compared again: the tools
        feed several derived values, and comparing their schemas is most of what a hit costs."""
        hit = self._derived.get(name)
        if hit is not None and len(hit[0]) == len(of) and all(a is b for a, b in zip(hit[0], of, strict=True)) \
                and self._unchanged(hit[0], hit[1]):
            return cast(T, hit[2])
        value = make()
        kept = tuple(self._copy(obj) for obj in of)
        self._derived[name] = (of, kept, value)
        return value

    def _copy(self, obj: Any) -> Any:
        """A copy of ``obj`` to compare it with later: the one it was found equal to in this projection, when
        there is one (so the values derived from one object share its copy and compare it once)."""
        for o, k in self._checked:
            if o is obj:
                return k
        kept = copy.deepcopy(obj)
        self._checked.append((obj, kept))
        return kept

    def _unchanged(self, of: tuple[Any, ...], kept: tuple[Any, ...]) -> bool:
        """Whether each object of ``of`` still equals its copy ``kept``; an object found equal in this
        projection already (``_checked``: the very object with the very copy it was compared to) is not
        compared again."""
        for obj, then in zip(of, kept, strict=True):
            if any(o is obj and k is then for o, k in self._checked):
                continue
            if obj != then:
                return False
            self._checked.append((obj, then))
        return True

    def message_json(self, msg: Message) -> str:
        """``canonical(msg)`` of a request's text message (the system prompt, the pinned facts, the summary),
        remembered by its role and text while the last ``KEEP_PROJECTIONS`` projections used it: they repeat
        from one request to the next, and the system prompt is the longest text of most requests."""
        if set(msg) != {"role", "content"} or type(msg["role"]) is not str or type(msg["content"]) is not str:
            return canonical(msg)
        key = (msg["role"], msg["content"])
        text = self.encoded.get(key)
        if text is None:
            text = canonical(msg)
            self.encoded.put(key, text)
        return text

    def take_thread(self, key: tuple[Any, ...]) -> Any:
        """The kept pass over a thread for ``key`` (removed: its taker keeps it again when done), or None."""
        with self._threads_lock:
            return self._threads.pop(key, None)

    def keep_thread(self, key: tuple[Any, ...], builder: Any) -> None:
        with self._threads_lock:
            self._threads[key] = builder
            while len(self._threads) > THREAD_PASSES:
                self._threads.popitem(last=False)

    def meter(self, tokenizer: Tokenizer) -> Meter:
        """Counting with ``tokenizer`` through this cache."""
        key = id(tokenizer.encoding)
        self._encodings.setdefault(key, tokenizer.encoding)
        self._checked = []
        self._next_epoch()
        return Meter(tokenizer, key, self)

    def _next_epoch(self) -> None:
        for table in (self.counts, self.cuts, self.rendered, self.encoded):
            table.epoch += 1
            table.sweep(table.epoch - self.KEEP_PROJECTIONS)

    def render(self, ev: Event) -> Message | None:
        """``render(ev)``, remembered per row (seq, hash). A hit also needs the fields a renderer reads
        to be equal, so the result is always exactly ``render(ev)``, even for a row edited behind its hash."""
        msg = self._rendered(ev).message
        return None if msg is None else dict(msg)

    def _rendered(self, ev: Event) -> _Rendered:
        """The cache's entry for ``ev``, made (and kept) on a miss; its message is never handed out (callers
        copy it)."""
        fields: _Fields = (ev.kind, ev.tick, ev.ts, ev.payload)
        if not ev.hash:
            return _Rendered(fields, render(ev))
        key = (ev.seq, ev.hash)
        hit = self.rendered.get(key)
        if hit is not None and hit.fields == fields:
            return hit
        entry = _Rendered(fields, render(ev))
        self.rendered.put(key, entry)
        return entry

    def event_message(self, ev: Event, count: Callable[[Message], int], encoding: int) -> tuple[Message, int] | None:
        """(``render(ev)``, its tokens), None when the model does not see ``ev``: one lookup for both. The
        tokens are the count stored with the row (logs written before counting moved off the append path),
        else ``count(message)`` (``encoding`` names what counts), counted once and remembered with the
        rendering."""
        hit = self._rendered(ev)
        msg = hit.message
        if msg is None:
            return None
        if ev.tokens is not None:
            return dict(msg), ev.tokens
        counted = hit.tokens
        if counted is None or counted[0] != encoding:
            counted = hit.tokens = (encoding, count(msg))
        return dict(msg), counted[1]

    def clear(self) -> None:
        self.loaded = None
        self.hashed = None
        self._derived.clear()
        self._checked = []
        self._stable.clear()
        with self._threads_lock:
            self._threads.clear()
        self.counts.clear()
        self.cuts.clear()
        self.rendered.clear()
        self.encoded.clear()


LONG_TEXT = 200_000   # characters: a text this long is cut from a tokenization of its head
HEAD_SLACK = 8192


class Meter:
    """Token arithmetic (``agent.tokens``) for one tokenizer, remembered in a ``ProjectionCache``."""

    def __init__(self, tokenizer: Tokenizer, key: int, cache: ProjectionCache) -> None:
        self.tokenizer = tokenizer
        self._key = key
        self.cache = cache

    @property
    def key(self) -> int:
        """What names this meter's encoding in the cache's tables."""
        return self._key

    def count(self, text: str) -> int:
        key = (self._key, text)
        n = self.cache.counts.get(key)
        if n is None:
            n = self.tokenizer.count(text)
            self.cache.counts.put(key, n)
        return n

    def cut(self, text: str, cap: int) -> tuple[str, int, int]:
        """(prefix of ``text`` within ``cap`` tokens, tokens kept, tokens in full)."""
        key = (self._key, text, cap)
        hit = self.cache.cuts.get(key)
        if hit is None:
            hit = self._cut_long(text, cap) or self.tokenizer.cut(text, cap)
            self.cache.cuts.put(key, hit)
        return hit

    def _cut_long(self, text: str, cap: int) -> tuple[str, int, int] | None:
        """The cut of a very long text from a tokenization of its head only (the same tokens: the
        encoder splits text into short pieces first, and the head ends far past the cap), with the
        full count remembered once; None when the text is short or the head does not reach the cap."""
        if len(text) < LONG_TEXT or cap < 0:
            return None
        ids = self.tokenizer.encoding.encode_ordinary(text[: cap * 16 + HEAD_SLACK])
        if len(ids) < cap + 256:
            return None
        return self.tokenizer.encoding.decode(ids[:cap]), cap, self.count(text)

    def message(self, msg: Message) -> int:
        return message_tokens(msg, self.count)

    def text_message(self, text: str) -> int:
        return text_message_tokens(text, self.count)

    def tools(self, tools: list[dict[str, Any]]) -> int:
        return 0 if not tools else self.count(self.cache.derived("tools_json", (tools,), lambda: tools_json(tools)))

    def render(self, ev: Event) -> Message | None:
        return self.cache.render(ev)

    def event_tokens(self, ev: Event) -> int | None:
        """Tokens of ``ev``'s message, None when the model does not see it: the count stored with the row
        (logs written before counting moved off the append path), else counted from its rendering and
        remembered with it."""
        hit = self.cache.event_message(ev, self.message, self._key)
        return None if hit is None else hit[1]

    def event_message(self, ev: Event) -> tuple[Message, int] | None:
        """(``ev``'s message, its tokens), None when the model does not see it (``event_tokens``)."""
        return self.cache.event_message(ev, self.message, self._key)
