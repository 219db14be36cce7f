"""Token counting for projections: one bounded cache of token counts, and the arithmetic built on it.

A ``ProjectionCache`` is an object its owner keeps (the app keeps one for the life of the process) and
passes to every projection: it remembers the token count of each text it was asked about, per encoding,
dropping the least recently used past ``COUNT_ENTRIES`` texts or ``COUNT_CHARS`` characters of them. A
count is a pure function of the encoding and the text, so the cache never changes a request's bytes.

A ``CountFile`` in the data directory keeps counts across processes, so a fresh process (a timer-driven
tick, ``context``, ``replay``) reads the counts of texts counted before instead of loading the tokenizer
and counting them again. It is a cache, not a record: never part of the event log or its hash chain, it
may be deleted at any time, and a count it holds is used only when it proves to be the count of that very
text (``CountFile`` says how); anything else is counted again.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from agent import logsetup
from agent.events import Event, render
from agent.tokens import Tokenizer, message_tokens, text_message_tokens, tools_json

logger = logsetup.get_logger(__name__)

COUNT_ENTRIES = 4096       # texts whose token count is kept
COUNT_CHARS = 16 << 20     # and at most this many characters of them: one 5 MB tool output must not pin 4,096 copies

Message = dict[str, Any]

COUNT_FILE = "token-counts"           # its name in the data directory
MAGIC = b"fleet-agent token counts file 1\n"   # one record long: a second copy only costs one record
RECORD = struct.Struct("<16sII8s")   # text digest, count, text's UTF-8 length, check of the three
assert len(MAGIC) == RECORD.size
FILE_RECORDS = 32_768                # past this many records the file is rewritten with the newest half


def _digest(key: str, text: str) -> tuple[bytes, int]:
    """(digest of the encoding key and the text, the text's UTF-8 length)."""
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(key.encode() + b"\0" + data, digest_size=16).digest(), len(data)


def _check(digest: bytes, count: int, size: int) -> bytes:
    return hashlib.blake2b(digest + count.to_bytes(4, "little") + size.to_bytes(4, "little"), digest_size=8,
                           key=MAGIC).digest()


def _sound(digest: bytes, count: int, size: int, check: bytes) -> bool:
    """Whether a record is as it was written and its count one a text of ``size`` bytes can have (at least
    one token for a non-empty text, at most one a byte)."""
    return check == _check(digest, count, size) and (size == 0 or 1 <= count <= size)


class CountFile:
    """Token counts kept in a file across processes: fixed-size records, each the digest of (encoding, text),
    the count, the text's UTF-8 length and a check over the three, appended as texts are counted.

    A count is used only when its record's check holds, the text has the recorded length, and the count is
    one a text of that length can have (at least one token for a non-empty text, at most one per byte):
    a torn, truncated or damaged record, or a file that is not one of these, is ignored and the text
    counted again. Reading needs no tokenizer and is one pass over at most ``FILE_RECORDS`` records;
    writing is best effort (a read-only data directory only means counting again next time)."""

    def __init__(self, path: str | os.PathLike[str], max_records: int = FILE_RECORDS) -> None:
        self.path = os.fspath(path)
        self.max_records = max_records
        self._index: dict[bytes, tuple[int, int, bytes]] | None = None
        self._records = 0
        self._foreign = False   # the file is not a count file: replaced at the first write
        self._fd: int | None = None
        self._writable = True
        self.rejected = 0   # records found but not used (damaged, or not matching their text)

    def _load(self) -> dict[bytes, tuple[int, int, bytes]]:
        if self._index is not None:
            return self._index
        self._index = {}
        try:
            with open(self.path, "rb") as f:
                data = f.read(len(MAGIC) + RECORD.size * self.max_records * 2)
        except OSError:
            return self._index
        if not data.startswith(MAGIC):
            self.rejected += 1
            self._foreign = True
            return self._index
        body = memoryview(data)[len(MAGIC):]
        body = body[: len(body) - len(body) % RECORD.size]   # a record torn by a crash is left out
        self._index = {d: (n, size, check) for d, n, size, check in RECORD.iter_unpack(body)}
        self._records = len(body) // RECORD.size
        return self._index

    def get(self, key: str, text: str) -> int | None:
        """The kept count of ``text`` in encoding ``key``, or None (not kept, or not trustworthy)."""
        index = self._load()
        if not index:
            return None
        digest, size = _digest(key, text)
        hit = index.get(digest)
        if hit is None:
            return None
        n, kept_size, check = hit
        if not _sound(digest, n, kept_size, check) or kept_size != size:
            self.rejected += 1
            del index[digest]
            if self.rejected * 4 > len(index):   # a damaged file: the next count kept rewrites it
                self._foreign = True
            return None
        return n

    def put(self, key: str, text: str, count: int) -> None:
        """Keep ``count`` for ``text`` (best effort)."""
        if not self._writable:
            return
        index = self._load()
        digest, size = _digest(key, text)
        if digest in index or size >= 1 << 32:
            return
        record = RECORD.pack(digest, count, size, _check(digest, count, size))
        index[digest] = (count, size, record[-8:])
        try:
            if self._records >= self.max_records or self._foreign:
                self._rewrite()
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                size = os.fstat(self._fd).st_size
                if size % RECORD.size:   # a record torn by a crash: what follows would be misread
                    self._rewrite()
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o600)
                elif size == 0:
                    os.write(self._fd, MAGIC)
            os.write(self._fd, record)
            self._records += 1
        except OSError as e:
            self._writable = False
            logger.debug("context.counts_unwritable", path=self.path, error=str(e))

    def _rewrite(self) -> None:
        """Keep the newest half: a new file put in place at once (a writer still appending to the old
        one loses its records, which only costs a count later)."""
        assert self._index is not None
        keep = [(d, r) for d, r in self._index.items() if _sound(d, *r)][-(self.max_records // 2):]
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "wb") as f:
            f.write(MAGIC + b"".join(RECORD.pack(d, n, size, check) for d, (n, size, check) in keep))
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.path)
        self.close()
        self._index = dict(keep)
        self._records = len(keep)
        self._foreign = False

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class ProjectionCache:
    """Token counts by (encoding, text), least recently used dropped first; behind them, when given, the
    counts a ``CountFile`` kept from earlier processes."""

    def __init__(self, max_entries: int = COUNT_ENTRIES, max_chars: int = COUNT_CHARS,
                 counts: CountFile | None = None) -> None:
        self.max_entries = max_entries
        self.max_chars = max_chars
        self.file = counts
        self._counts: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def count(self, tokenizer: Tokenizer | Callable[[], Tokenizer], text: str, key: str | None = None) -> int:
        """The token count of ``text``, remembered: ``tokenizer`` (or the function that loads it, called
        only when no kept count serves) counts it; ``key`` names the encoding (``encoding_key``; by default
        the tokenizer's)."""
        if not text:
            return 0
        if key is None:
            if not isinstance(tokenizer, Tokenizer):
                tokenizer = tokenizer()
            key = tokenizer.key

        def counted() -> int:
            return (tokenizer if isinstance(tokenizer, Tokenizer) else tokenizer()).count(text)

        return self.kept(key, text, counted)

    def kept(self, key: str, text: str, compute: Callable[[], int]) -> int:
        """``compute()``, a pure function of ``key`` and ``text`` between 0 and the text's UTF-8 length,
        remembered here and in the count file."""
        ck = (key, text)
        with self._lock:
            n = self._counts.get(ck)
            if n is not None:
                self._counts.move_to_end(ck)
                return n
            kept = self.file.get(key, text) if self.file is not None and text else None
        if kept is not None:
            n = kept
        else:
            n = compute()
            if self.file is not None and text:
                with self._lock:
                    self.file.put(key, text, n)
        if len(text) > self.max_chars:
            return n
        with self._lock:
            if ck not in self._counts:
                self._counts[ck] = n
                self._chars += len(text)
                while len(self._counts) > self.max_entries or self._chars > self.max_chars:
                    (_, dropped), _ = self._counts.popitem(last=False)
                    self._chars -= len(dropped)
        return n

    def meter(self, tokenizer: Tokenizer | Callable[[], Tokenizer], key: str | None = None) -> Meter:
        """Counting with ``tokenizer`` (or the function that loads it, on first need) through this cache;
        ``key``: ``encoding_key`` of what it loads, required with a function."""
        return Meter(tokenizer, self, key)

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
    """Token arithmetic (``agent.tokens``) for one tokenizer, its counts remembered in a ``ProjectionCache``.
    Given the function that loads the tokenizer, it loads it only when a count is not kept, or a text is cut."""

    def __init__(self, tokenizer: Tokenizer | Callable[[], Tokenizer], cache: ProjectionCache,
                 key: str | None = None) -> None:
        if isinstance(tokenizer, Tokenizer):
            self._tokenizer: Tokenizer | None = tokenizer
            self._load: Callable[[], Tokenizer] | None = None
            self.key = key or tokenizer.key
        else:
            if key is None:
                raise ValueError("a meter that loads its tokenizer on demand needs the encoding's key")
            self._tokenizer, self._load, self.key = None, tokenizer, key
        self.cache = cache

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            assert self._load is not None
            self._tokenizer = self._load()
        return self._tokenizer

    def _loaded(self) -> Tokenizer:
        return self.tokenizer

    def count(self, text: str) -> int:
        return self.cache.count(self._tokenizer or self._loaded, text, self.key)

    def cut(self, text: str, cap: int) -> tuple[str, int, int]:
        """(prefix of ``text`` within ``cap`` tokens, tokens kept, tokens in full). The length of the prefix
        is remembered like a count, when the cut falls between characters (as it nearly always does)."""
        full = self.count(text)
        if full <= cap:
            return text, full, full
        if cap <= 0:
            return "", cap, full
        cut: list[tuple[str, int, int]] = []

        def chars() -> int:
            cut.append(self.tokenizer.cut(text, cap))
            kept = cut[0][0]
            return len(kept) if text.startswith(kept) else 0

        n = self.cache.kept(f"{self.key}|prefix within {cap}", text, chars)
        if n > 0 and not cut:
            return text[:n], cap, full
        return cut[0] if cut else self.tokenizer.cut(text, cap)

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
