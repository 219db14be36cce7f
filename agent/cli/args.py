"""Argument types for the CLI: numbers are checked where they are parsed, so a bad one is one usage
line (exit 2), never an overflow deep inside SQLite or a server."""

from __future__ import annotations

import argparse
import math

from agent.errors import UsageError

SQLITE_MAX_INT = 2**63 - 1


def _int(v: str, what: str) -> int:
    try:
        n = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not {what}") from None
    if n > SQLITE_MAX_INT:
        raise argparse.ArgumentTypeError(f"{v!r} is too large for {what}")
    return n


def number(v: str) -> int:
    """A whole number >= 1 (an alert, directive or event number; a limit)."""
    n = _int(v, "a whole number of 1 or more")
    if n < 1:
        raise argparse.ArgumentTypeError(f"{v!r}: use a whole number of 1 or more")
    return n


def count(v: str) -> int:
    """A whole number >= 0 (a seq, a tick, a seed)."""
    n = _int(v, "a whole number of 0 or more")
    if n < 0:
        raise argparse.ArgumentTypeError(f"{v!r}: use a whole number of 0 or more")
    return n


def port(v: str) -> int:
    """A TCP port, 1-65535."""
    n = _int(v, "a port number (1-65535)")
    if not 1 <= n <= 65535:
        raise argparse.ArgumentTypeError(f"{v!r}: a port is between 1 and 65535")
    return n


def positive(v: str) -> float:
    """A finite number > 0 (a speed, a number of seconds)."""
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
    if not math.isfinite(x) or x <= 0:
        raise argparse.ArgumentTypeError(f"{v!r}: use a finite number greater than 0")
    return x


def check_utf8(ns: argparse.Namespace) -> None:
    """Refuse any argument that is not valid UTF-8 (it reaches Python as lone surrogates, which no log,
    database or terminal can hold), naming the argument."""
    for name, value in vars(ns).items():
        for v in value if isinstance(value, list) else [value]:
            if not isinstance(v, str):
                continue
            try:
                v.encode("utf-8")
            except UnicodeEncodeError as e:
                bad = ord(v[e.start])
                byte = f"byte 0x{bad - 0xDC00:02x}" if 0xDC80 <= bad <= 0xDCFF else f"U+{bad:04X}"
                flag = name if name in ("text", "query", "name", "dir") else "--" + name.replace("_", "-")
                raise UsageError(f"{flag}: not valid UTF-8 ({byte} at character {e.start}); write it as UTF-8 "
                                 "(check your terminal's or file's encoding)") from None


def non_negative(v: str) -> float:
    """A finite number >= 0 (seconds; 0 turns a delay off)."""
    try:
        x = float(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{v!r} is not a number") from None
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{v!r}: use a finite number of 0 or more")
    return x


def fraction(v: str) -> float:
    """A probability, 0 to 1."""
    x = non_negative(v)
    if x > 1:
        raise argparse.ArgumentTypeError(f"{v!r}: use a probability between 0 and 1")
    return x
