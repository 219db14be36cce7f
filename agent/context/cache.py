"""Token counting for projections: one bounded cache of token counts, and the arithmetic built on it.

A ``ProjectionCache`` is an object its owner keeps (the app keeps one for the life of the process) and
passes to every projection: it remembers the token count of each text it was asked about, per encoding,
dropping the least recently used past ``COUNT_ENTRIES`` texts or ``COUNT_CHARS`` characters of them. A
count is a pure function of the encoding and the text, so the cache never changes a request's bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from agent.events import Event, render
from agent.tokens import Tokenizer, message_tokens, text_message_tokens, tools_json

COUNT_ENTRIES = 4096       # texts whose token count is kept
COUNT_CHARS = 16 << 20     # and at most this many characters of them: one 5 MB tool output must not pin 4,096 copies

Message = dict[str, Any]


class ProjectionCache:
    """Token counts by (encoding, text), least recently used dropped first."""

    def __init__(self, max_entries: int = COUNT_ENTRIES, max_chars: int = COUNT_CHARS) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self._counts: OrderedDict[tuple[int, str], int] = OrderedDict()
        self._encodings: dict[int, Any] = {}   # keeps each encoding counted with alive, so its id stays its own
        self._chars = 0
        self._lock = threading.Lock()

    def count(self, tokenizer: Tokenizer, text: str) -> int:
        """``tokenizer.count(text)``, remembered."""
        key = (id(tokenizer.encoding), text)
        with self._lock:
            self._encodings.setdefault(key[0], tokenizer.encoding)
            n = self._counts.get(key)
            if n is not None:
                self._counts.move_to_end(key)
                return n
        n = tokenizer.count(text)
        if len(text) > self.max_chars:
            return n
        with self._lock:
            if key not in self._counts:
                self._counts[key] = n
                self._chars += len(text)
                while len(self._counts) > self.max_entries or self._chars > self.max_chars:
                    (_, dropped), _ = self._counts.popitem(last=False)
                    self._chars -= len(dropped)
        return n

    def meter(self, tokenizer: Tokenizer) -> Meter:
        """Counting with ``tokenizer`` through this cache."""
        return Meter(tokenizer, self)

    def clear(self) -> None:
        with self._lock:
            self._counts.clear()
            self._chars = 0

    @property
    def entries(self) -> int:
        """Texts whose count is kept."""
        return len(self._counts)

    @property
    def chars(self) -> int:
        """Characters of the texts whose count is kept."""
        return self._chars


class Meter:
    """Token arithmetic (``agent.tokens``) for one tokenizer, its counts remembered in a ``ProjectionCache``."""

    def __init__(self, tokenizer: Tokenizer, cache: ProjectionCache) -> None:
        self.tokenizer = tokenizer
        self.cache = cache

    def count(self, text: str) -> int:
        return self.cache.count(self.tokenizer, text)

    def cut(self, text: str, cap: int) -> tuple[str, int, int]:
        """(prefix of ``text`` within ``cap`` tokens, tokens kept, tokens in full)."""
        return self.tokenizer.cut(text, cap)

    def message(self, msg: Message) -> int:
        return message_tokens(msg, self.count)

    def text_message(self, text: str) -> int:
        return text_message_tokens(text, self.count)

    def tools(self, tools: list[dict[str, Any]]) -> int:
        return 0 if not tools else self.count(tools_json(tools))

    def event_message(self, ev: Event) -> tuple[Message, int] | None:
        """(``ev``'s message, its tokens), None when the model does not see it. The tokens are the count
        stored with the row (logs written before counting moved off the append path), else counted."""
        msg = render(ev)
        if msg is None:
            return None
        return msg, ev.tokens if ev.tokens is not None else self.message(msg)

    def event_tokens(self, ev: Event) -> int | None:
        """Tokens of ``ev``'s message, None when the model does not see it (``event_message``)."""
        hit = self.event_message(ev)
        return None if hit is None else hit[1]
