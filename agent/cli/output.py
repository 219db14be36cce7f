"""Terminal-safe output: text from the model, vast.ai, instance logs, knowledge files or notes never
drives the operator's terminal.

Every CLI line goes through ``out``. Control characters, ANSI escape sequences, line and paragraph
separators, bidirectional overrides, zero-width characters and lone surrogates are shown visibly,
as ``cat -v`` and systemctl do: C0 controls in caret notation (ESC as ``^[``, CR as ``^M``), the rest
as ``<U+XXXX>``. List views pass each field through ``line`` first so a newline in a title cannot
forge a row: one record, one line. JSON output keeps the data exact and escapes the same characters
as ``\\uXXXX`` (``json_text``).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable

# C0 controls and DEL (tab and newline are handled per mode), C1 controls (U+0085 among them), soft
# hyphen, Arabic letter mark, Mongolian vowel separator, zero-width and directional marks, line and
# paragraph separators, bidi embeddings/overrides/isolates, invisible operators, BOM, interlinear
# annotation, lone surrogates and tag characters.
_INVISIBLE = ("\x80-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb"
              "\ud800-\udfff\U000e0000-\U000e007f")
_UNSAFE_LINE = f"[\x00-\x1f\x7f{_INVISIBLE}]"
_UNSAFE_TEXT = f"[\x00-\x08\x0b-\x1f\x7f{_INVISIBLE}]"  # keeps \t and \n
_UNSAFE_JSON = f"[{_INVISIBLE}]"  # json.dumps already escapes C0 controls
_compiled: dict[str, re.Pattern[str]] = {}


def _safe(s: str, pattern: str, repl: Callable[[re.Match[str]], str], keep: str = "") -> str:
    """``re.sub(pattern, repl, s)``, the pattern compiled on first use. Every character a pattern matches is
    one ``str.isprintable`` refuses, so text that is printable but for the characters in ``keep`` (which no
    pattern given them matches) is returned as it is, unscanned: nearly every line, and no pattern compiled."""
    plain = s
    for c in keep:
        plain = plain.replace(c, "")
    if plain.isprintable():
        return s
    if pattern not in _compiled:
        _compiled[pattern] = re.compile(pattern)
    return _compiled[pattern].sub(repl, s)


def _visible(m: re.Match[str]) -> str:
    c = m.group()
    o = ord(c)
    if o < 0x20:
        return "^" + chr(o + 0x40)
    if o == 0x7F:
        return "^?"
    return f"<U+{o:04X}>"


def line(text: object) -> str:
    """``text`` as one terminal-safe line: newlines, tabs and every control character made visible."""
    return _safe(str(text), _UNSAFE_LINE, _visible)


def text(s: object) -> str:
    """``s`` terminal-safe, keeping its newlines and tabs (for multi-line views like ``knowledge show``)."""
    return _safe(str(s), _UNSAFE_TEXT, _visible, keep="\n\t")


def _json_escape(m: re.Match[str]) -> str:
    o = ord(m.group())
    if o > 0xFFFF:  # JSON spells characters beyond the BMP as a surrogate pair
        o -= 0x10000
        return f"\\u{0xD800 + (o >> 10):04x}\\u{0xDC00 + (o & 0x3FF):04x}"
    return f"\\u{o:04x}"


def json_text(obj: object, **kwargs: object) -> str:
    """``json.dumps(obj, ensure_ascii=False, ...)`` with the invisible characters escaped as ``\\uXXXX``."""
    dumped = json.dumps(obj, ensure_ascii=False, **kwargs)  # type: ignore[arg-type]
    return _safe(dumped, _UNSAFE_JSON, _json_escape, keep="\n")


def out(s: str = "") -> None:
    """Write ``s`` and a newline to stdout, terminal-safe (newlines and tabs kept)."""
    sys.stdout.write(text(s) + "\n")
