"""Loading the config costs little: agent/config.py reads annotations, scalars, names and paths with string
methods, and imports neither typing, re, pathlib, threading nor structlog to load a plain config.

Each function that stands for a regular expression, for ``typing`` or for ``pathlib`` is checked here against
the thing it stands for, on every case that can tell them apart.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from agent import config
from agent.errors import ConfigError
from agent.record import fields_of, is_record

# ------------------------------------------------------------------ what a command imports


def test_loading_a_plain_config_imports_no_typing_re_pathlib_or_structlog(tmp_path: Path) -> None:
    """A new process that imports agent.config and loads the config 'fleet-agent init' writes has not
    imported typing, re, pathlib (nor urllib.parse and ipaddress, which it brings), threading, contextlib,
    structlog or PyYAML; asking for a path (Settings.db_path) then imports pathlib and gives a Path."""
    cfg = tmp_path / "config.yaml"
    cfg.write_text(config.example_text(), encoding="utf-8")
    heavy = ("typing", "re", "pathlib", "urllib.parse", "ipaddress", "threading", "contextlib", "structlog", "yaml",
             "agent.logsetup", "dataclasses")
    code = (f"import sys\nfrom agent import config\ns = config.load({str(cfg)!r})\n"
            f"print(s.agent_id, [m for m in {heavy!r} if m in sys.modules])\n"
            "p = s.db_path\nprint(type(p).__name__, 'pathlib' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, check=True,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(config.__file__).parent.parent),
                                                                          *sys.path])})
    assert r.stdout.splitlines() == ["fleet-1 []", "PosixPath True"]


# ------------------------------------------------------------------ field types without typing


def _sections() -> list[type]:
    out, todo = [], [config.Settings]
    while todo:
        cls = todo.pop()
        out.append(cls)
        todo.extend(k.section for k in config._field_kinds(cls).values() if k.section is not None)
    return out


def _hints(cls: type) -> dict[str, object]:
    # The Literal aliases are written as text that names Literal, which the module imports only for type checkers.
    return typing.get_type_hints(cls, localns={"Literal": typing.Literal})


def _expected(t: object) -> tuple[str, object]:
    """What the config must do with a field of type ``t``, worked out through typing: (kind, detail)."""
    if is_record(t):
        return "section", t
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin in (typing.Union, __import__("types").UnionType):
        inner = [a for a in args if a is not type(None)]
        assert len(inner) == 1 and len(args) == 2
        kind, detail = _expected(inner[0])
        return kind + " or null", detail
    if origin is typing.Literal:
        return "one of", args
    return "value", t


def test_every_field_reads_as_its_annotation_says() -> None:
    """For every field of Settings and of each of its sections (12 classes, every annotation there is), the
    kind the config reads from the annotation's text is what typing.get_type_hints gives: the same section
    class, the same Literal choices in order, the same converter for the same type, nullable exactly when the
    type is ``X | None``; and internal fields are no YAML key."""
    sections = _sections()
    assert len(sections) == 12
    converters = {config.Duration: config._to_duration, bool: config._to_bool, int: config._to_int,
                  float: config._to_float, str: config._to_str, list[str]: config._to_str_list,
                  list[int]: config._to_int_list, dict[str, str]: config._to_str_map}
    seen: set[str] = set()
    for cls in sections:
        hints = _hints(cls)
        kinds = config._field_kinds(cls)
        assert list(kinds) == [n for n, _, meta, _ in fields_of(cls) if not meta.get("internal")], cls
        for name, kind in kinds.items():
            what, detail = _expected(hints[name])
            seen.add(what)
            if what == "section":
                assert kind.section is detail, (cls, name)
                continue
            assert kind.section is None, (cls, name)
            assert kind.expected.endswith(" or null") == what.endswith(" or null"), (cls, name, kind.expected)
            if what.endswith(" or null"):
                assert kind.convert(None) is None
            if what.startswith("one of"):
                assert isinstance(detail, tuple)
                assert kind.expected.removesuffix(" or null") == "one of " + ", ".join(repr(c) for c in detail)
                for c in detail:
                    assert kind.convert(c) == c
                with pytest.raises(config._Refused):
                    kind.convert("not-" + detail[0])
            else:
                base_text = fields_of(cls)[[f[0] for f in fields_of(cls)].index(name)][1].removesuffix(" | None")
                assert config._SCALARS[base_text][0] is converters[detail], (cls, name)
    assert seen == {"section", "value", "value or null", "one of"}


def test_the_literal_aliases_are_what_type_checkers_read() -> None:
    """Each Literal alias (written as text) gives the choices typing reads from the same text, and a setting's
    error lists them as before: "expected one of 'debug', 'info', 'warning', 'error'"."""
    for alias in ("LogLevel", "LogFormat", "TextToolCalls", "ProviderName"):
        text = getattr(config, alias)
        assert config._literal_choices(text) == typing.get_args(eval(text, {"Literal": typing.Literal}))  # noqa: S307
    with pytest.raises(ConfigError, match=r"f.yaml:2: logging.level: expected one of 'debug', 'info', 'warning', "
                                          r"'error', got 'loud'$"):
        config.parse("logging:\n  level: loud\n", "f.yaml")


@pytest.mark.parametrize("text", ["complex", "list[float]", "Settings | None", "Path", "Literal['a']",
                                  "dict[str, int]", "None"])
def test_an_annotation_the_config_cannot_read_is_refused(text: str) -> None:
    """A field type the config has no converter for (a new setting written with one) fails loudly, naming it,
    instead of accepting any value."""
    with pytest.raises(TypeError, match=re.escape(repr(text))):
        config._kind(text)


# ------------------------------------------------------------------ string methods for regular expressions

_SAMPLES = ["", " ", "0", "00", "-0", "+7", "07", "12", "1.5", "-2.25", "1.", ".5", "1.2.3", "+-1", "1e5", "1_0",
            "\u0665", "a", "a:", "a: b", "a:b", "  a: b  c", "_x1: [1]", "1a: b", "a b: c", "- x", "-  x", "-x", "  - a",
            "-", "- ", "a:  ", "é: x", "key:", "k::v", "Key_9: - a", "\t", "5m", "fleet-1", "fa-", "a" * 31, "a" * 32,
            "-a", "a-", "A", "http://x", "https://", "http:/x", "HTTP://x", "ftp://x"]
_ALPHABET = "ab_Z09.:- +\t\u0665é#[]\n"


def _strings(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return _SAMPLES + ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(n)]


def test_the_plain_scalars_and_lines_are_read_as_the_patterns_read_them() -> None:
    """_plain_int, _plain_float, _key_line, _item_line and _plain_chars agree with the regular expressions the
    plain reader used (whole match, groups stripped as the reader stripped them) on 20,000 strings built from
    the characters that matter (digits, signs, points, colons, dashes, spaces, tabs, non-ASCII digits)."""
    key, item = re.compile(r"( *)([A-Za-z_][A-Za-z0-9_]*):(?: +(.*))?"), re.compile(r"( *)- +(.*)")
    for s in _strings(20000, 1):
        assert config._plain_int(s) == bool(re.fullmatch(r"[-+]?(?:0|[1-9][0-9]*)", s)), s
        assert config._plain_float(s) == bool(re.fullmatch(r"[-+]?[0-9]+\.[0-9]+", s)), s
        assert config._plain_chars(s) == (re.search(r"[^\n\x20-\x7e]", s) is None), s
        line = s.replace("\n", "")  # (the reader's lines: the text split at line feeds)
        m = key.fullmatch(line)
        assert config._key_line(line) == (None if m is None else (m.group(2), (m.group(3) or "").strip())), line
        m = item.fullmatch(line)
        assert config._item_line(line) == (None if m is None else m.group(2)), line
    assert config._plain_chars("a: b\n  c: 1\n") and not config._plain_chars("a:\x7f") and not config._plain_chars("\r")


def test_durations_are_read_as_the_pattern_read_them() -> None:
    """_duration_text gives what ``^\\s*(\\d+(?:\\.\\d+)?)\\s*(ms|s|m|h|d)?\\s*$`` gave (times the unit), on
    20,000 strings of digits (ASCII and others), points, units and whitespace (Unicode's too); \\d and \\s are
    str.isdecimal and str.isspace for every character there is."""
    pattern = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}
    rng = random.Random(2)
    pieces = ["1", "5", "30", "0", ".", "\u0665", "\uff15", "ms", "s", "m", "h", "d", "w", " ", "\t", "\n", "\u2003",
              "x", "-", "e"]
    for s in ["5m", " 0.6s ", "2h", "10", "1.5 ms", "5.", ".5", "5 m s", "ms", "", "5\n"] + [
            "".join(rng.choice(pieces) for _ in range(rng.randint(0, 6))) for _ in range(20000)]:
        m = pattern.match(s)
        assert config._duration_text(s) == (None if m is None else float(m.group(1)) * units[m.group(2)]), repr(s)
    every = "".join(map(chr, range(0x110000)))
    assert re.findall(r"\d", every) == [c for c in every if c.isdecimal()]
    assert re.findall(r"\s", every) == [c for c in every if c.isspace()]


def test_names_and_urls_are_checked_as_the_patterns_checked_them() -> None:
    """agent_id, fleet.label_prefix and the http(s) URL settings are accepted exactly when their patterns
    matched (lengths at the limits, first characters, upper case and non-ASCII letters refused)."""
    rng = random.Random(3)
    alphabet = "az09-_A.\u0665é/:hHtps"
    for s in _strings(5000, 4) + ["".join(rng.choice(alphabet) for _ in range(rng.choice([1, 15, 16, 17, 30, 31, 32])))
                                   for _ in range(5000)]:
        assert config._is_agent_id(s) == bool(re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", s)), s
        assert config._is_label_prefix(s) == bool(re.fullmatch(r"[a-z0-9-]{1,16}", s)), s
        assert config._is_http_url(s) == bool(re.match(r"^https?://", s)), s


def test_the_usual_loopback_hosts_are_loopback_without_ipaddress() -> None:
    """is_loopback answers as ipaddress does, for the hosts it knows without importing it and for others."""
    import ipaddress

    for host in ("localhost", "127.0.0.1", "::1", "127.1.2.3", "0.0.0.0", "10.0.0.1", "::", "example.com", "[::1]"):
        try:
            expected = host == "localhost" or ipaddress.ip_address(host).is_loopback
        except ValueError:
            expected = False
        assert config.is_loopback(host) == expected, host


# ------------------------------------------------------------------ paths without pathlib


def test_path_text_is_what_pathlib_prints() -> None:
    """path_text(p) is str(Path(p)) for every string of slashes, dots, names and spaces up to 7 long (the
    config's file as loaded, in every message and in source_path, is what it was with pathlib)."""
    rng = random.Random(5)
    pieces = ["/", "/", ".", "..", "a", "b c", "", " "]
    for p in ["", ".", "/", "//", "///", "//a", "///a", "./config.yaml", "a//b/", "a/./b", "../x", "/etc/x/"] + [
            "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7))) for _ in range(20000)]:
        assert config.path_text(p) == str(Path(p)), repr(p)


def test_is_file_is_what_pathlib_says(tmp_path: Path) -> None:
    """_is_file agrees with Path.is_file: a file, a symlink to one, a directory, nothing, a broken symlink, a
    symlink loop, a path through a file, a NUL in the name."""
    (tmp_path / "f").write_text("x", encoding="utf-8")
    (tmp_path / "d").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "f")
    (tmp_path / "broken").symlink_to(tmp_path / "nothing")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    for name in ("f", "d", "link", "broken", "loop", "nothing", "f/x", "a\0b", "f/"):
        p = config.path_text(str(tmp_path / name) if name != "f/" else str(tmp_path) + "/f/")
        assert config._is_file(p) == Path(p).is_file(), name


def test_find_config_and_load_name_the_file_as_before(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """find_config still returns a Path; load reads the file it finds (through --config, $FLEET_AGENT_CONFIG
    or ./config.yaml) and keeps its path, as pathlib writes it, as source_path; a missing file is refused
    naming what was given."""
    monkeypatch.chdir(tmp_path)
    Path("config.yaml").write_text("agent_id: here\n", encoding="utf-8")
    Path("sub").mkdir()
    Path("sub/other.yaml").write_text("agent_id: there\r\n", encoding="utf-8")
    assert config.find_config(None, {}) == Path("config.yaml")
    assert isinstance(config.find_config("./sub//other.yaml", {}), Path)
    s = config.load(None, {})
    assert (s.agent_id, s.source_path, s.base_dir) == ("here", "config.yaml", tmp_path.resolve())
    s = config.load("./sub//other.yaml/", {})
    assert (s.agent_id, s.source_path) == ("there", "sub/other.yaml")
    s = config.load(None, {"FLEET_AGENT_CONFIG": "sub/./other.yaml"})
    assert s.source_path == "sub/other.yaml"
    with pytest.raises(ConfigError, match=r"^\$FLEET_AGENT_CONFIG=sub/nothing.yaml: no such file$"):
        config.load(None, {"FLEET_AGENT_CONFIG": "./sub//nothing.yaml"})
    with pytest.raises(ConfigError, match=r"^sub/: no such config file"):
        config.load("sub/", {})
    Path("sub/bad.yaml").write_bytes(b"agent_id: \xff\n")
    with pytest.raises(ConfigError, match=r"^sub/bad.yaml: not UTF-8 text; save the config as UTF-8$"):
        config.load("./sub/bad.yaml", {})


def test_the_database_file_text_is_the_database_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings.db_file (what a command opens the log with, without pathlib) is str(Settings.db_path) and
    path_text(p) is str(path(p)): data_dir relative, absolute, with '~', '$VAR', './' and doubled slashes;
    storage.url as a file; the config loaded through a symlink from another directory (its real directory
    is the base) and a config with no file (the working directory is the base)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "root"))
    (tmp_path / "real").mkdir()
    (tmp_path / "link").mkdir()
    monkeypatch.chdir(tmp_path / "link")
    cases = ["./data", "data//x/", "/abs/./data", "~/fleet", "$DATA_ROOT/d", ".", "../up", "", "sub/../x"]
    for i, data_dir in enumerate(cases):
        text = f"agent_id: a\ndata_dir: {data_dir!r}\n"
        real = tmp_path / "real" / f"c{i}.yaml"
        real.write_text(text, encoding="utf-8")
        (tmp_path / "link" / f"c{i}.yaml").symlink_to(real)
        for s in (config.load(f"c{i}.yaml"), config.parse(text, "<string>")):
            assert s.db_file == str(s.db_path), (data_dir, s.source_path)
            for p in (*cases, "x.db", "//two/x"):
                assert s.path_text(p) == str(s.path(p)), (p, s.source_path)
    s = config.parse("agent_id: a\nstorage:\n  url: ./db//here.sqlite\n", "<string>")
    assert s.db_file == str(s.db_path) == str(Path.cwd() / "db/here.sqlite")
