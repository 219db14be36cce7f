"""The config's plain reader (agent/config.py ``_read_plain``) against PyYAML.

A config written in the plain subset is read without importing PyYAML; whatever it reads must be what
PyYAML's safe loader reads (the same values of the same types, the same line for every key), and
whatever it does not read exactly it leaves to PyYAML, which also words every error.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent import config, configyaml
from agent.errors import ConfigError

SCALARS = [
    "5m", "0.6s", "127.0.0.1:9464", "http://127.0.0.1:8000/v1", "ghcr.io/x/y:1.4.2", "RTX 4090", "fa-", "a  b",
    "yes", "No", "on", "OFF", "true", "False", "y", "n", "null", "~", "Null", "NULL", "nil",
    "0", "-0", "+7", "42", "012", "08", "0x1F", "0b101", "1_000", "1:20", "1:20.5", "-1:30",
    ".5", "5.", "1.5", "-2.25", "+0.5", "00.5", "1e5", "1.0e+5", "1.0e5", ".inf", "-.inf", ".nan", "1.0",
    "2026-01-01", "2026-1-1 10:00:00", "2026-01-01T10:00:00Z", "<<", "=", "it's", "a#b", "a # c", "a: b", "a:",
    ":a", "-a", "- a", "-", "?x", "? x", "a]", "a[1]", "%x", "@x", "`x`", "&x 1", "*x", "!!str 1", "|", ">",
    '"q"', "'q'", '"a # b"', '"a\\tb"', "'it''s'", '"x" # c', '"x"#c', "'x' # c", '"unclosed', '"x"y', '""', "''",
    "[]", "[a, b]", "[RTX 4090, \"L40S\"]", "[1, 2.5, yes, null]", "[a, ]", '["a, b"]', "[a] # c", "[a]b",
    "[a]#c", "[[a]]", "[a: b]", "[-1, +2]", "{}", "{} # c", "{a: 1}", "a\tb", "é", "x\r",
]
TYPICAL = ["5m", "30s", "127.0.0.1:9464", "info", "null", "false", "8", "0.95", "[RTX 4090, L40S]", "[]", "{}",
           "'quoted # text'", '"x"', "~", "yes", "-3"]
KEYS = ["a", "b_c", "on", "null", "x1", "Key", "env", "yes", "2", "a-b", '"q"']


def _scalar(rng: random.Random) -> str:
    s = rng.choice(SCALARS if rng.random() < 0.3 else TYPICAL)
    return s + rng.choice(["", "", "", "  ", " # note", "#x"])


def _block(rng: random.Random, indent: int, depth: int, lines: list[str]) -> None:
    keys = rng.sample(KEYS, rng.randint(1, 4))
    if rng.random() < 0.05:
        keys.append(keys[0])  # a repeated key
    for key in keys:
        pad = " " * (indent + (1 if rng.random() < 0.03 else 0))
        if rng.random() < 0.15:
            lines.append(rng.choice(["", "# comment", "   # indented comment", "---", "  "]))
        r = rng.random()
        if r < 0.55 or depth > 2:
            lines.append(f"{pad}{key}: {_scalar(rng)}")
        elif r < 0.75:
            lines.append(f"{pad}{key}:" + rng.choice(["", " # sub", "  "]))
            _block(rng, indent + rng.choice([2, 4]), depth + 1, lines)
        elif r < 0.95:
            lines.append(f"{pad}{key}:")
            at = indent + rng.choice([0, 2, 2, 4])
            for _ in range(rng.randint(1, 3)):
                lines.append(" " * at + rng.choice(["- ", "- ", "-  ", "-"]) + _scalar(rng))
                if rng.random() < 0.05:
                    lines.append(" " * (at + 2) + "continued")
        else:
            lines.append(f"{pad}{key}:")


def _doc(rng: random.Random) -> str:
    lines: list[str] = []
    _block(rng, 0, 0, lines)
    return "\n".join(lines) + rng.choice(["\n", "", "\n\n"])


def _typed(v: Any) -> Any:
    """``v`` with the type of every value kept (1, 1.0 and True are equal in Python)."""
    if isinstance(v, dict):
        return {k: _typed(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_typed(x) for x in v]
    return (type(v).__name__, repr(v))


def _pyyaml(text: str) -> tuple[Any, dict[tuple[str, ...], int]] | str:
    try:
        data, loc = configyaml.parse(text, "f.yaml")
    except ConfigError as e:
        return str(e)
    return _typed(data), loc.lines


def test_the_resolvers_are_pyyamls_own() -> None:
    """The patterns the plain reader uses to tell text from numbers, booleans, nulls, dates, '<<' and '=' are
    exactly PyYAML's implicit resolvers (all of them but the one for single '!', '&' and '*', which the reader
    refuses as a first character)."""
    theirs = {rx.pattern for resolvers in yaml.resolver.Resolver.yaml_implicit_resolvers.values()
              for tag, rx in resolvers if tag != "tag:yaml.org,2002:yaml"}
    assert set(config._YAML_RESOLVER_PATTERNS) == theirs  # (compiled with re.X: the same for '<<' and '=')
    assert config._yaml_resolved("012") and not config._yaml_resolved("5m") and not config._yaml_resolved("1.2.3")


def test_what_the_plain_reader_reads_is_what_pyyaml_reads() -> None:
    """On 4,000 generated documents (every tricky scalar form, nesting, lists at both indents, comments, repeated
    keys, bad indentation, tabs, non-ASCII), the plain reader either gives PyYAML's values with their types and
    PyYAML's line for each key, or declines: it declines every document PyYAML refuses. Both outcomes occur."""
    rng = random.Random(17)
    read = declined = 0
    for _ in range(4000):
        text = _doc(rng)
        plain, theirs = config._read_plain(text, "f.yaml"), _pyyaml(text)
        if plain is None:
            declined += 1
            continue
        read += 1
        assert not isinstance(theirs, str), (text, theirs)
        assert (_typed(plain[0]), plain[1].lines) == theirs, text
    assert read > 400 and declined > 400, (read, declined)


@pytest.mark.parametrize(("text", "expected"), [
    ("a: 5m\nb:\n  c: [x, 'y z']\n  d:\n  - 1\n  - 2.5\n", {"a": "5m", "b": {"c": ["x", "y z"], "d": [1, 2.5]}}),
    ("a: yes # on\nb: ~\nc: \"#not a comment\"\nd: {}\n", {"a": True, "b": None, "c": "#not a comment", "d": {}}),
    ("# only a comment\n", {}),
    ("", {}),
])
def test_plain_configs_are_read_without_pyyaml(text: str, expected: dict[str, Any]) -> None:
    """Typical config text is read by the plain reader itself, with the values PyYAML gives."""
    got = config._read_plain(text, "f.yaml")
    assert got is not None and _typed(got[0]) == _typed(expected) == _pyyaml(text)[0]


@pytest.mark.parametrize("text", ["a: 1\na: 2\n", "a: [1, 2\n", "a: b: c\n", "a:\n  b: 1\n c: 2\n", "a: 2026-13-45\n",
                                  "a: &x 1\nb: *x\n", "a: 012\n", "- a\n", "a: 'x''y'\n", "a:\tb\n"])
def test_anything_else_goes_to_pyyaml_which_words_the_error(text: str, tmp_path: Path) -> None:
    """Repeated keys, broken flow lists, nested colons, bad indentation, bad dates, aliases, octal numbers, a
    top-level list, escaped quotes and tabs are left to PyYAML; config.parse says the same as PyYAML's path
    (the file and line of the problem, or the value PyYAML reads)."""
    assert config._read_plain(text, "f.yaml") is None
    theirs = _pyyaml(text)
    if isinstance(theirs, str):
        with pytest.raises(ConfigError) as e:
            config._parse_yaml(text, "f.yaml")
        assert str(e.value) == theirs
    else:
        data, loc = config._parse_yaml(text, "f.yaml")
        assert (_typed(data), loc.lines) == theirs


def test_loading_the_example_config_does_not_import_pyyaml(tmp_path: Path) -> None:
    """config.load of the shipped example (the config every 'fleet-agent init' writes) leaves PyYAML unloaded;
    a config outside the plain subset loads it (the probe sees it when it is there)."""
    plain = tmp_path / "plain.yaml"
    plain.write_text(config.example_text(), encoding="utf-8")
    other = tmp_path / "other.yaml"
    other.write_text(config.example_text().replace("agent_id: fleet-1", "agent_id: 'fleet-1' # \u00e9"),
                     encoding="utf-8")
    code = ("import sys\nfrom agent import config\nfor p in sys.argv[1:]:\n    s = config.load(p)\n"
            "    print(s.agent_id, 'yaml' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code, str(plain), str(other)], capture_output=True, text=True,
                       timeout=60, check=True)
    assert r.stdout.split("\n")[:2] == ["fleet-1 False", "fleet-1 True"]
